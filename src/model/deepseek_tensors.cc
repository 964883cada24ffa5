#include "model/deepseek_tensors.h"

#include "base/error.h"

namespace latent::model {
namespace {

// A pointer target, or none when listing.
template <class T>
TensorTarget To(T* p) {
  return p != nullptr ? TensorTarget{p} : TensorTarget{};
}

}  // namespace

DeepseekTensors::DeepseekTensors(const ModelConfig& config, ExpertLayout layout,
                                 DeepseekWeights* weights, const TensorVisitor& visit,
                                 int64_t slots)
    : c_(config), layout_(layout), w_(weights), visit_(visit) {
  if (w_ != nullptr) w_->layers.resize(slots >= 0 ? slots : c_.num_hidden_layers);
}

LayerWeights* DeepseekTensors::Layer(int64_t layer) const {
  return w_ != nullptr ? &w_->layers[layer] : nullptr;
}

void DeepseekTensors::Linear(const std::string& name, Shape shape, kernels::WeightRef* target,
                             QuantizeRule rule) {
  Add(name, std::move(shape), WeightKind::kLinear, rule, To(target));
}

void DeepseekTensors::Norm(const std::string& name, int64_t width, NormWeight* target) {
  Add(name, {width}, WeightKind::kNorm, QuantizeRule::kKeep, To(target));
}

void DeepseekTensors::F32(const std::string& name, Shape shape, std::vector<float>* target) {
  Add(name, std::move(shape), WeightKind::kRouter, QuantizeRule::kKeep, To(target));
}

void DeepseekTensors::Add(std::string name, Shape shape, WeightKind kind, QuantizeRule rule,
                          TensorTarget target, Presence presence) {
  visit_(ExpectedWeight{std::move(name), std::move(shape), kind, rule, target, presence, expert_});
}

void DeepseekTensors::Embedding() {
  Add("model.embed_tokens.weight", {c_.vocab_size, c_.hidden_size}, WeightKind::kEmbedding,
      QuantizeRule::kKeep, To(w_ ? &w_->embed : nullptr));
}

void DeepseekTensors::InputNorm(int64_t l) {
  LayerWeights* L = Layer(l);
  Add(LayerPrefix(l) + "input_layernorm.weight", {c_.hidden_size}, WeightKind::kNorm,
      QuantizeRule::kKeep, To(L ? &L->input_norm : nullptr));
}

void DeepseekTensors::PostAttentionNorm(int64_t l) {
  LayerWeights* L = Layer(l);
  Add(LayerPrefix(l) + "post_attention_layernorm.weight", {c_.hidden_size}, WeightKind::kNorm,
      QuantizeRule::kKeep, To(L ? &L->post_attention_norm : nullptr));
}

void DeepseekTensors::MlaAttention(int64_t l, MlaQuery query) {
  MlaAttentionAt(l, LayerPrefix(l) + "self_attn.", query);
}

void DeepseekTensors::MlaAttentionAt(int64_t l, const std::string& a, MlaQuery query) {
  const int64_t h = c_.num_attention_heads;
  const int64_t d = c_.hidden_size;
  AttentionWeights* w = Layer(l) ? &Layer(l)->attention : nullptr;
  constexpr auto kLinear = WeightKind::kLinear;
  constexpr auto kQuantized = QuantizeRule::kWeightsAndActivations;
  if (c_.q_lora_rank) {
    const int64_t q = *c_.q_lora_rank;
    Add(a + "q_a_proj.weight", {q, d}, kLinear, kQuantized, To(w ? &w->q_a.emplace() : nullptr));
    Add(a + "q_a_layernorm.weight", {q}, WeightKind::kNorm, QuantizeRule::kKeep,
        To(w ? &w->q_a_norm : nullptr));
    if (query == MlaQuery::kFusedOutputGate) {
      Add(a + "q_b_proj.weight", {h * (c_.qk_head_dim() + c_.v_head_dim), 2 * q}, kLinear,
          kQuantized, To(w ? &w->q_gate.emplace() : nullptr));
    } else {
      Add(a + "q_b_proj.weight", {h * c_.qk_head_dim(), q}, kLinear, kQuantized,
          To(w ? &w->q_b.emplace() : nullptr));
    }
  } else {
    LATENT_CHECK(query == MlaQuery::kPlain);
    Add(a + "q_proj.weight", {h * c_.qk_head_dim(), d}, kLinear, kQuantized,
        To(w ? &w->q_proj.emplace() : nullptr));
  }
  Add(a + "kv_a_proj_with_mqa.weight", {c_.kv_lora_rank + c_.qk_rope_head_dim, d}, kLinear,
      kQuantized, To(w ? &w->kv_a : nullptr));
  Add(a + "kv_a_layernorm.weight", {c_.kv_lora_rank}, WeightKind::kNorm, QuantizeRule::kKeep,
      To(w ? &w->kv_a_norm : nullptr));
  // kv_b's inputs stay f32 under w8a8 (model/load_options.h says why).
  Add(a + "kv_b_proj.weight", {h * (c_.qk_nope_head_dim + c_.v_head_dim), c_.kv_lora_rank},
      kLinear, QuantizeRule::kWeights, To(w ? &w->kv_b : nullptr));
  Add(a + "o_proj.weight", {d, h * c_.v_head_dim}, kLinear, kQuantized, To(w ? &w->o : nullptr));
}

void DeepseekTensors::DsaIndexer(int64_t l) {
  const std::string x = LayerPrefix(l) + "self_attn.indexer.";
  const int64_t di = c_.index_head_dim;
  IndexerWeights* w = Layer(l) ? &Layer(l)->indexer.emplace() : nullptr;
  // The indexer stays as stored under --quantize: its scores pick positions, and int8 would
  // change which.
  Add(x + "wq_b.weight", {c_.index_n_heads * di, *c_.q_lora_rank}, WeightKind::kLinear,
      QuantizeRule::kKeep, To(w ? &w->wq_b : nullptr));
  Add(x + "wk.weight", {di, c_.hidden_size}, WeightKind::kLinear, QuantizeRule::kKeep,
      To(w ? &w->wk : nullptr));
  Add(x + "k_norm.weight", {di}, WeightKind::kNorm, QuantizeRule::kKeep, To(w ? &w->k_norm : nullptr));
  Add(x + "k_norm.bias", {di}, WeightKind::kNorm, QuantizeRule::kKeep,
      To(w ? &w->k_norm_bias : nullptr));
  // Kept in f32 and never quantized, like the router.
  Add(x + "weights_proj.weight", {c_.index_n_heads, c_.hidden_size}, WeightKind::kRouter,
      QuantizeRule::kKeep, To(w ? &w->weights_proj : nullptr));
}

void DeepseekTensors::Mlp(const std::string& p, int64_t inter, ops::MlpWeights* w) {
  const int64_t d = c_.hidden_size;
  constexpr auto kQuantized = QuantizeRule::kWeightsAndActivations;
  Add(p + "gate_proj.weight", {inter, d}, WeightKind::kLinear, kQuantized, To(w ? &w->gate : nullptr));
  Add(p + "up_proj.weight", {inter, d}, WeightKind::kLinear, kQuantized, To(w ? &w->up : nullptr));
  Add(p + "down_proj.weight", {d, inter}, WeightKind::kLinear, kQuantized, To(w ? &w->down : nullptr));
}

void DeepseekTensors::DenseMlp(int64_t l) {
  LayerWeights* L = Layer(l);
  Mlp(LayerPrefix(l) + "mlp.", c_.intermediate_size, L ? &L->dense.emplace() : nullptr);
}

void DeepseekTensors::Moe(int64_t l, Presence score_bias) {
  MoeAt(l, LayerPrefix(l) + "mlp.", {}, score_bias);
}

void DeepseekTensors::MoeAt(int64_t slot, const std::string& p, const MoeNames& names,
                            Presence score_bias) {
  const int64_t d = c_.hidden_size;
  const int64_t e = c_.n_routed_experts;
  const int64_t i = c_.moe_intermediate_size;
  MoeWeights* w = Layer(slot) ? &Layer(slot)->moe.emplace() : nullptr;
  if (w != nullptr) w->experts.resize(e);
  Add(p + "gate.weight", {e, d}, WeightKind::kRouter, QuantizeRule::kKeep,
      To(w ? &w->router : nullptr));
  if (c_.topk_method == TopkMethod::kNoauxTc) {
    Add(p + names.score_bias, {e}, WeightKind::kBuffer, QuantizeRule::kKeep,
        To(w ? &w->bias : nullptr), score_bias);
  }
  if (layout_ == ExpertLayout::kPerExpert) {
    for (int64_t x = 0; x < e; ++x) {
      expert_ = x;
      const std::string expert = StrCat(p, "experts.", x, ".");
      ops::MlpWeights* m = w ? &w->experts[x] : nullptr;
      Linear(expert + names.gate + ".weight", {i, d}, m ? &m->gate : nullptr);
      Linear(expert + names.up + ".weight", {i, d}, m ? &m->up : nullptr);
      Linear(expert + names.down + ".weight", {d, i}, m ? &m->down : nullptr);
    }
    expert_ = -1;
  } else {
    const auto fused = [&](bool gate_up) {
      return w ? TensorTarget{FusedExperts{&w->experts, gate_up}} : TensorTarget{};
    };
    Add(p + "experts.gate_up_proj", {e, 2 * i, d}, WeightKind::kExperts,
        QuantizeRule::kWeightsAndActivations, fused(true));
    Add(p + "experts.down_proj", {e, d, i}, WeightKind::kExperts,
        QuantizeRule::kWeightsAndActivations, fused(false));
  }
  if (c_.n_shared_experts > 0) {
    const int64_t shared = c_.shared_expert_intermediate_size > 0 ? c_.shared_expert_intermediate_size : i;
    Mlp(p + "shared_experts.", shared * c_.n_shared_experts, w ? &w->shared.emplace() : nullptr);
  }
}

void DeepseekTensors::KdaAttentionAt(int64_t slot, const std::string& a, Shape a_log_shape) {
  ops::KdaWeights* k = Layer(slot) ? &Layer(slot)->kda.emplace() : nullptr;
  const int64_t d = c_.hidden_size, h = c_.linear_num_heads, dk = c_.linear_head_dim, ch = h * dk;
  const int64_t taps = c_.linear_conv_kernel;
  Linear(a + "q_proj.weight", {ch, d}, k ? &k->q : nullptr);
  Linear(a + "k_proj.weight", {ch, d}, k ? &k->k : nullptr);
  Linear(a + "v_proj.weight", {ch, d}, k ? &k->v : nullptr);
  F32(a + "q_conv1d.weight", {ch, 1, taps}, k ? &k->q_conv : nullptr);
  F32(a + "k_conv1d.weight", {ch, 1, taps}, k ? &k->k_conv : nullptr);
  F32(a + "v_conv1d.weight", {ch, 1, taps}, k ? &k->v_conv : nullptr);
  F32(a + "A_log", std::move(a_log_shape), k ? &k->forget.a_log : nullptr);
  F32(a + "dt_bias", {ch}, k ? &k->forget.dt_bias : nullptr);
  Linear(a + "f_a_proj.weight", {dk, d}, k ? &k->forget.f_a : nullptr);
  Linear(a + "f_b_proj.weight", {ch, dk}, k ? &k->forget.f_b : nullptr);
  Linear(a + "b_proj.weight", {h, d}, k ? &k->b : nullptr);
  Linear(a + "g_a_proj.weight", {dk, d}, k ? &k->g_a : nullptr);
  Linear(a + "g_b_proj.weight", {ch, dk}, k ? &k->g_b : nullptr);
  Norm(a + "o_norm.weight", dk, k ? &k->o_norm : nullptr);
  Linear(a + "o_proj.weight", {d, ch}, k ? &k->o : nullptr);
}

void DeepseekTensors::HyperConnection(const std::string& p,
                                      std::optional<ops::HyperConnectionWeights>* target) {
  ops::HyperConnectionWeights* w = target ? &target->emplace() : nullptr;
  const int64_t n = c_.hc_mult;
  const bool mix = c_.hc_sinkhorn_iters > 0;  // mHC: the comb's N*N rows and a third scale
  const int64_t rows = (mix ? 2 + n : 2) * n;
  F32(p + "fn", {rows, n * c_.hidden_size}, w ? &w->fn : nullptr);
  F32(p + "base", {rows}, w ? &w->base : nullptr);
  F32(p + "scale", {mix ? 3 : 2}, w ? &w->scale : nullptr);
}

void DeepseekTensors::PostMlpNorm(int64_t l, bool used) {
  LayerWeights* L = used ? Layer(l) : nullptr;
  Add(LayerPrefix(l) + "post_mlp_layernorm.weight", {c_.hidden_size}, WeightKind::kNorm,
      QuantizeRule::kKeep, To(L ? &L->post_mlp_norm : nullptr),
      used ? Presence::kRequired : Presence::kUnused);
}

void DeepseekTensors::GatedNorm(const std::string& p, NormWeight* norm,
                                std::optional<NormGateWeights>* gate) {
  const int64_t d = c_.hidden_size;
  const int64_t r = c_.gated_norm_rank;
  NormGateWeights* g = gate != nullptr ? &gate->emplace() : nullptr;
  Add(p + "norm.weight", {d}, WeightKind::kNorm, QuantizeRule::kKeep, To(norm));
  // Small, and kept as stored: FP8 checkpoints leave them unquantized too.
  Add(p + "W_down.weight", {r, d}, WeightKind::kLinear, QuantizeRule::kKeep, To(g ? &g->down : nullptr));
  Add(p + "W_up.weight", {d, r}, WeightKind::kLinear, QuantizeRule::kKeep, To(g ? &g->up : nullptr));
}

void DeepseekTensors::GatedInputNorm(int64_t l) {
  LayerWeights* L = Layer(l);
  GatedNorm(LayerPrefix(l) + "input_layernorm.", L ? &L->input_norm : nullptr,
            L ? &L->input_norm_gate : nullptr);
}

void DeepseekTensors::GatedPostAttentionNorm(int64_t l) {
  LayerWeights* L = Layer(l);
  GatedNorm(LayerPrefix(l) + "post_attention_layernorm.", L ? &L->post_attention_norm : nullptr,
            L ? &L->post_attention_norm_gate : nullptr);
}

void DeepseekTensors::FinalNorm() {
  Add("model.norm.weight", {c_.hidden_size}, WeightKind::kNorm, QuantizeRule::kKeep,
      To(w_ ? &w_->final_norm : nullptr));
}

void DeepseekTensors::LmHead() {
  // Tied: the LM head is the embedding (the loader points lm_head at it), unless the checkpoint
  // stores a head of its own (Presence::kTiedHead).
  Add("lm_head.weight", {c_.vocab_size, c_.hidden_size}, WeightKind::kEmbedding,
      QuantizeRule::kWeightsAndActivations, To(w_ ? &w_->lm_head : nullptr),
      c_.tie_word_embeddings ? Presence::kTiedHead : Presence::kRequired);
}

void DeepseekTensors::InputNormAt(int64_t slot, const std::string& name) {
  LayerWeights* L = Layer(slot);
  Add(name, {c_.hidden_size}, WeightKind::kNorm, QuantizeRule::kKeep, To(L ? &L->input_norm : nullptr));
}

void DeepseekTensors::PostAttentionNormAt(int64_t slot, const std::string& name) {
  LayerWeights* L = Layer(slot);
  Add(name, {c_.hidden_size}, WeightKind::kNorm, QuantizeRule::kKeep,
      To(L ? &L->post_attention_norm : nullptr));
}

void DeepseekTensors::DenseMlpAt(int64_t slot, const std::string& prefix) {
  LayerWeights* L = Layer(slot);
  Mlp(prefix, c_.intermediate_size, L ? &L->dense.emplace() : nullptr);
}

void DeepseekTensors::ZeroExpertMoeAt(int64_t slot, const std::string& p) {
  const int64_t d = c_.hidden_size;
  const int64_t e = c_.n_routed_experts;
  const int64_t scored = e + c_.zero_expert_num;  // the router's outputs
  const int64_t i = c_.moe_intermediate_size;
  MoeWeights* w = Layer(slot) ? &Layer(slot)->moe.emplace() : nullptr;
  if (w != nullptr) w->experts.resize(e);
  Add(p + "router.classifier.weight", {scored, d}, WeightKind::kRouter, QuantizeRule::kKeep,
      To(w ? &w->router : nullptr));
  if (c_.router_bias) {
    // transformers' router computes F.linear(x, classifier.weight): the bias is never added.
    Add(p + "router.classifier.bias", {scored}, WeightKind::kUnused, QuantizeRule::kKeep, {});
  }
  Add(p + "router.e_score_correction_bias", {scored}, WeightKind::kBuffer, QuantizeRule::kKeep,
      To(w ? &w->bias : nullptr));
  if (layout_ == ExpertLayout::kPerExpert) {
    for (int64_t x = 0; x < e; ++x) {
      expert_ = x;
      Mlp(StrCat(p, "experts.", x, "."), i, w ? &w->experts[x] : nullptr);
    }
    expert_ = -1;
    for (int64_t x = e; x < scored; ++x) {
      // An identity expert: transformers' fused gate_up_proj has rows for it, down_proj not.
      for (const char* part : {"gate_proj.weight", "up_proj.weight"}) {
        Add(StrCat(p, "experts.", x, ".", part), {i, d}, WeightKind::kUnused, QuantizeRule::kKeep, {});
      }
    }
  } else {
    // Fused [E+Z, 2I, D] gate_up (the loader reads the first E experts) and [E, D, I] down.
    const auto fused = [&](bool gate_up) {
      return w ? TensorTarget{FusedExperts{&w->experts, gate_up}} : TensorTarget{};
    };
    Add(p + "experts.gate_up_proj", {scored, 2 * i, d}, WeightKind::kExperts,
        QuantizeRule::kWeightsAndActivations, fused(true));
    Add(p + "experts.down_proj", {e, d, i}, WeightKind::kExperts,
        QuantizeRule::kWeightsAndActivations, fused(false));
  }
}

}  // namespace latent::model
