// Hy4 (hy_v4): V3.2-style DSA on every layer, with
//  - hyper-connections: hc_mult residual streams per token in f32; around each block a
//    hyper-connection collapses them into the block's input and adds the block's output back to
//    each stream with its own gate; the head collapses them once more before the final norm
//    (ops/hyper_connections.h);
//  - a learned attention-sink logit per head (kernels/attention.h), in both MLA forms;
//  - a per-channel output gate sigmoid(gate_proj(x)) on each head's output before o_proj;
//  - rotate-half rope (V3 YaRN mscale); the indexer rotates the LAST rope dims of its heads and
//    normalises its keys with eps rms_norm_eps;
//  - "full" indexer layers (layer 0 and every fourth from 1) whose top-k the "shared" layers
//    after them reuse (indexer_types);
//  - routed experts with a clamped SwiGLU (swiglu_limit), a dense first layer, f32 lm_head.
// Tensors under the names save_pretrained writes (the hub's, which transformers renames on
// load): layers.N.hc_pre.hc_{attn,mlp}_layer.hc_{fn,base,scale}, self_attn.linear_gate (the
// output gate), self_attn.learnable_sink_param, mlp.linear_gate / mlp.shared_experts.linear_gate
// (the MLPs' gate_proj), fused experts, model.hc_pre.hc_head.hc_head_{fn,base,scale}.
#include <cmath>

#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"
#include "ops/hyper_connections.h"

namespace latent::model {
namespace {

// transformers' HYV4Config defaults.
ArchDefaults Defaults() {
  ArchDefaults d;
  d.first_k_dense_replace = 1;
  d.n_group = 1;
  d.topk_group = 1;
  d.n_shared_experts = 1;
  d.routed_scaling_factor = 2.827;
  d.norm_topk_prob = true;
  d.topk_methods = {TopkMethod::kNoauxTc};
  d.scoring = ScoringFunc::kSigmoid;
  d.max_position_embeddings = 262144;
  d.bos = 120000;
  d.eos = 120025;
  return d;
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  const int64_t layers = config.num_hidden_layers;
  config.rope_interleave = false;  // rotate-half, in attention and indexer alike
  config.rms_norm_eps = top.NumberOr("rms_norm_eps", 1e-5);
  if (!(config.rms_norm_eps > 0)) Fail(source, ": 'rms_norm_eps' must be positive");
  // Without mlp_layer_types transformers makes layer 0 dense and every later one MoE.
  if (!top.Has("mlp_layer_types")) {
    for (int64_t l = 0; l < layers; ++l) config.moe_layers[l] = l >= 1;
    if (config.n_routed_experts == 0 && layers > 1) {
      Fail(source, ": hy_v4 layers after the first are MoE (no mlp_layer_types), but n_routed_experts is 0");
    }
  }
  if (top.Has("layer_types")) {
    const Json& kinds = top["layer_types"];
    if (!kinds.is_array() || static_cast<int64_t>(kinds.size()) != layers) {
      Fail(source, ": 'layer_types' must have one entry per layer (", layers, ")");
    }
    for (const Json& kind : kinds) {
      if (kind != "indexed_attention") {
        Fail(source, ": hy_v4 layer_types entries must be \"indexed_attention\", got ", kind.dump());
      }
    }
  }
  ParseDsaIndexer(top, config, /*default_heads=*/16, /*query_latent=*/true);
  if (top.Has("indexer_types")) {
    ParseIndexShare(top, config);
  } else {  // transformers' default: full at layer 0 and where (l - 1) % 4 == 0
    config.indexer_layers.clear();
    for (int64_t l = 0; l < layers; ++l) config.indexer_layers.push_back(l == 0 || (l - 1) % 4 == 0);
  }
  config.index_rope_last = true;
  config.index_k_norm_eps = config.rms_norm_eps;
  config.hc_mult = top.IntOr("hc_mult", 4);
  if (config.hc_mult <= 0) Fail(source, ": 'hc_mult' must be positive, got ", config.hc_mult);
  config.hc_magnitude = top.NumberOr("hc_magnitude", 2.0);
  config.hc_eps = top.NumberOr("hc_eps", 1e-6);
  // Values at or below zero disable the clamp, as in transformers.
  config.swiglu_limit = std::max(0.0, top.NumberOr("swiglu_limit", 10.0));
}

// Every tensor under the names save_pretrained writes; with `w`, where each one loads.
class Tensors {
 public:
  Tensors(const ModelConfig& c, DeepseekWeights* w, const TensorVisitor& visit)
      : c_(c), w_(w), visit_(visit) {
    if (w_ != nullptr) w_->layers.resize(c_.num_hidden_layers);
  }

  void All() {
    Add("model.embed_tokens.weight", {c_.vocab_size, c_.hidden_size}, WeightKind::kEmbedding,
        QuantizeRule::kKeep, To(w_ ? &w_->embed : nullptr));
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) Layer(l);
    ops::HyperHeadWeights* head = w_ ? &w_->hc_head.emplace() : nullptr;
    const std::string h = "model.hc_pre.hc_head.hc_head_";
    const int64_t n = c_.hc_mult;
    F32(h + "fn", {n, n * c_.hidden_size}, head ? &head->fn : nullptr);
    F32(h + "base", {n}, head ? &head->base : nullptr);
    F32(h + "scale", {1}, head ? &head->scale : nullptr);
    Add("model.norm.weight", {c_.hidden_size}, WeightKind::kNorm, QuantizeRule::kKeep,
        To(w_ ? &w_->final_norm : nullptr));
    if (!c_.tie_word_embeddings) {
      // Stored in f32 (transformers keeps lm_head in f32); --quantize may still convert it.
      Add("lm_head.weight", {c_.vocab_size, c_.hidden_size}, WeightKind::kEmbedding,
          QuantizeRule::kWeightsAndActivations, To(w_ ? &w_->lm_head : nullptr));
    }
  }

 private:
  template <class T>
  static TensorTarget To(T* p) {
    return p != nullptr ? TensorTarget{p} : TensorTarget{};
  }

  void Add(std::string name, Shape shape, WeightKind kind, QuantizeRule rule, TensorTarget target) {
    visit_(ExpectedWeight{std::move(name), std::move(shape), kind, rule, target, Presence::kRequired});
  }

  void Linear(const std::string& name, Shape shape, QuantizeRule rule, kernels::WeightRef* target) {
    Add(name, std::move(shape), WeightKind::kLinear, rule, To(target));
  }

  void Norm(const std::string& name, int64_t d, NormWeight* target) {
    Add(name, {d}, WeightKind::kNorm, QuantizeRule::kKeep, To(target));
  }

  // A small parameter transformers keeps in f32 (like a router): loaded as f32, never quantized.
  void F32(const std::string& name, Shape shape, std::vector<float>* target) {
    Add(name, std::move(shape), WeightKind::kRouter, QuantizeRule::kKeep, To(target));
  }

  // hc_pre.hc_<kind>_layer.hc_{fn, base, scale}: pre and post gates of N streams.
  void HyperConnection(const std::string& p, std::optional<ops::HyperConnectionWeights>* target) {
    ops::HyperConnectionWeights* w = target ? &target->emplace() : nullptr;
    const int64_t n = c_.hc_mult;
    F32(p + "hc_fn", {2 * n, n * c_.hidden_size}, w ? &w->fn : nullptr);
    F32(p + "hc_base", {2 * n}, w ? &w->base : nullptr);
    F32(p + "hc_scale", {2}, w ? &w->scale : nullptr);
  }

  // linear_gate (gate_proj), up_proj, down_proj.
  void Mlp(const std::string& p, int64_t inter, ops::MlpWeights* w) {
    const int64_t d = c_.hidden_size;
    constexpr auto kQuantized = QuantizeRule::kWeightsAndActivations;
    Linear(p + "linear_gate.weight", {inter, d}, kQuantized, w ? &w->gate : nullptr);
    Linear(p + "up_proj.weight", {inter, d}, kQuantized, w ? &w->up : nullptr);
    Linear(p + "down_proj.weight", {d, inter}, kQuantized, w ? &w->down : nullptr);
  }

  void Layer(int64_t l) {
    LayerWeights* L = w_ ? &w_->layers[l] : nullptr;
    const std::string p = StrCat("model.layers.", l, ".");
    const std::string a = p + "self_attn.";
    const int64_t h = c_.num_attention_heads;
    const int64_t d = c_.hidden_size;
    const int64_t q = *c_.q_lora_rank;
    AttentionWeights* at = L ? &L->attention : nullptr;
    constexpr auto kQuantized = QuantizeRule::kWeightsAndActivations;
    HyperConnection(p + "hc_pre.hc_attn_layer.", L ? &L->attn_hc : nullptr);
    HyperConnection(p + "hc_pre.hc_mlp_layer.", L ? &L->ffn_hc : nullptr);
    Norm(p + "input_layernorm.weight", d, L ? &L->input_norm : nullptr);
    Linear(a + "q_a_proj.weight", {q, d}, kQuantized, at ? &at->q_a.emplace() : nullptr);
    Norm(a + "q_a_layernorm.weight", q, at ? &at->q_a_norm : nullptr);
    Linear(a + "q_b_proj.weight", {h * c_.qk_head_dim(), q}, kQuantized, at ? &at->q_b.emplace() : nullptr);
    Linear(a + "kv_a_proj_with_mqa.weight", {c_.kv_lora_rank + c_.qk_rope_head_dim, d}, kQuantized,
           at ? &at->kv_a : nullptr);
    Norm(a + "kv_a_layernorm.weight", c_.kv_lora_rank, at ? &at->kv_a_norm : nullptr);
    // kv_b's inputs stay f32 under w8a8, as for every family.
    Linear(a + "kv_b_proj.weight", {h * (c_.qk_nope_head_dim + c_.v_head_dim), c_.kv_lora_rank},
           QuantizeRule::kWeights, at ? &at->kv_b : nullptr);
    Linear(a + "o_proj.weight", {d, h * c_.v_head_dim}, kQuantized, at ? &at->o : nullptr);
    Linear(a + "linear_gate.weight", {h * c_.v_head_dim, d}, kQuantized,
           at ? &at->gate_proj.emplace() : nullptr);
    F32(a + "learnable_sink_param", {h}, at ? &at->sinks : nullptr);
    if (c_.HasIndexer(l)) Indexer(a + "indexer.", L ? &L->indexer.emplace() : nullptr);
    Norm(p + "post_attention_layernorm.weight", d, L ? &L->post_attention_norm : nullptr);
    if (!c_.IsMoeLayer(l)) {
      Mlp(p + "mlp.", c_.intermediate_size, L ? &L->dense.emplace() : nullptr);
      return;
    }
    const int64_t e = c_.n_routed_experts;
    const int64_t i = c_.moe_intermediate_size;
    MoeWeights* m = L ? &L->moe.emplace() : nullptr;
    if (m != nullptr) m->experts.resize(e);
    F32(p + "mlp.gate.weight", {e, d}, m ? &m->router : nullptr);
    Add(p + "mlp.gate.e_score_correction_bias", {e}, WeightKind::kBuffer, QuantizeRule::kKeep,
        To(m ? &m->bias : nullptr));
    // The experts are stored fused, as transformers holds them (its hub mapping for hy_v4 has no
    // per-expert form).
    const auto fused = [&](bool gate_up) {
      return m ? TensorTarget{FusedExperts{&m->experts, gate_up}} : TensorTarget{};
    };
    Add(p + "mlp.experts.gate_up_proj", {e, 2 * i, d}, WeightKind::kExperts, kQuantized, fused(true));
    Add(p + "mlp.experts.down_proj", {e, d, i}, WeightKind::kExperts, kQuantized, fused(false));
    if (c_.n_shared_experts > 0) {
      Mlp(p + "mlp.shared_experts.", i * c_.n_shared_experts, m ? &m->shared.emplace() : nullptr);
    }
  }

  // The indexer stays as stored under --quantize (its scores pick positions).
  void Indexer(const std::string& x, IndexerWeights* w) {
    const int64_t di = c_.index_head_dim;
    const int64_t d = c_.hidden_size;
    Linear(x + "wq_b.weight", {c_.index_n_heads * di, *c_.q_lora_rank}, QuantizeRule::kKeep,
           w ? &w->wq_b : nullptr);
    Linear(x + "wk.weight", {di, d}, QuantizeRule::kKeep, w ? &w->wk : nullptr);
    Norm(x + "k_norm.weight", di, w ? &w->k_norm : nullptr);
    Norm(x + "k_norm.bias", di, w ? &w->k_norm_bias : nullptr);
    F32(x + "weights_proj.weight", {c_.index_n_heads, d}, w ? &w->weights_proj : nullptr);
  }

  const ModelConfig& c_;
  DeepseekWeights* w_;
  const TensorVisitor& visit_;
};

void ForEachTensor(const ModelConfig& c, ExpertLayout, DeepseekWeights* w, const TensorVisitor& visit) {
  Tensors(c, w, visit).All();
}

// Every layer caches its latent; a layer running its own indexer also caches its key.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  cache::ModelCacheRows rows(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    rows[l].push_back(MlaLatentRow(c, dtype, c.RopeDims(l)));
    if (c.HasIndexer(l)) rows[l].push_back(DsaIndexKeyRow(c, dtype));
  }
  return rows;
}

ops::HyperConnectionDims HyperDims(const ModelConfig& c) {
  ops::HyperConnectionDims d;
  d.streams = c.hc_mult;
  d.hidden = c.hidden_size;
  d.norm_eps = static_cast<float>(c.rms_norm_eps);
  d.gate_eps = static_cast<float>(c.hc_eps);
  d.post_magnitude = static_cast<float>(c.hc_magnitude);
  return d;
}

class HyV4 final : public DeepseekModel {
 public:
  HyV4(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options,
                      /*index_rope_interleaved=*/false),
        hc_(HyperDims(this->config())) {}

  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override {
    LATENT_PROFILE_SCOPE(kStep);
    Activations a = Start(batch);
    const int64_t tokens = a.tokens;
    Embed(batch, a.hidden.data());
    std::vector<float> streams(tokens * hc_.flat());  // [T, N, D] the residual streams
    ops::BroadcastStreams(hc_, a.hidden.data(), tokens, streams.data());
    // [T] the positions each token attends to: from the layer's own indexer, or on a shared
    // layer the last full layer's.
    DsaSelection selection;
    if (trace != nullptr) trace->selected.assign(config().num_hidden_layers, {});
    for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
      const LayerWeights& w = layer(l);
      const ops::HyperGates attn_gates = Collapse(*w.attn_hc, streams, tokens, a.hidden.data());
      RmsNorm(a.hidden.data(), tokens, w.input_norm, a.normed.data());
      MlaAttention(l, batch, a.normed.data(), form, &selection, a.branch.data());
      if (trace != nullptr) trace->selected[l] = selection;
      Expand(attn_gates, a.branch.data(), tokens, streams);
      const ops::HyperGates ffn_gates = Collapse(*w.ffn_hc, streams, tokens, a.hidden.data());
      RmsNorm(a.hidden.data(), tokens, w.post_attention_norm, a.normed.data());
      FeedForward(l, a.normed.data(), tokens, a.branch.data(), trace);
      Expand(ffn_gates, a.branch.data(), tokens, streams);
      dump::Tensor("hidden", l, streams.data(), tokens, hc_.flat());
    }
    {
      LATENT_PROFILE_SCOPE(kResidual);
      ops::HyperHeadCollapse(hc_, *hc_head(), streams.data(), tokens, a.hidden.data());
    }
    Head(batch, a.hidden.data(), logits);
  }

 private:
  const ops::HyperHeadWeights* hc_head() const { return &*weights().hc_head; }

  // x [T, D] = the block input the hyper-connection `w` collapses from the streams; its gates.
  ops::HyperGates Collapse(const ops::HyperConnectionWeights& w, const std::vector<float>& streams,
                           int64_t tokens, float* x) const {
    LATENT_PROFILE_SCOPE(kResidual);
    ops::HyperGates gates = ops::ComputeHyperGates(hc_, w, streams.data(), tokens);
    ops::CollapseStreams(hc_, gates.pre.data(), streams.data(), tokens, x);
    return gates;
  }

  // The block's output branch [T, D] back into the streams.
  void Expand(const ops::HyperGates& gates, const float* branch, int64_t tokens,
              std::vector<float>& streams) const {
    LATENT_PROFILE_SCOPE(kResidual);
    ops::ExpandStreams(hc_, gates, branch, tokens, streams.data());
  }

  ops::HyperConnectionDims hc_;
};

Arch Make() {
  Arch arch;
  arch.name = "hy_v4";
  arch.model_types = {"hy_v4"};
  arch.defaults = Defaults();
  arch.parse = Parse;
  arch.tensors = [](const ModelConfig& c, ExpertLayout layout, const TensorVisitor& visit) {
    ForEachTensor(c, layout, nullptr, visit);
  };
  arch.cache_rows = CacheRows;
  arch.create = [](ModelConfig config, weights::Checkpoint ckpt,
                   const LoadOptions& options) -> std::unique_ptr<Model> {
    return std::make_unique<HyV4>(std::move(config), std::move(ckpt), options);
  };
  return arch;
}

}  // namespace

LATENT_ARCH(125, Make);

}  // namespace latent::model
