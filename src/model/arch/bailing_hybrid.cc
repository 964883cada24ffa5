// Ling 3 (bailing_hybrid): a hybrid of KDA linear-attention layers (model/kda_attention.h) and
// gated MLA layers, five KDA layers per MLA layer in Ling-3.0-Flash, with DeepSeek V3's MoE.
//  - KDA layers with full-rank forget and output gates (ops::FullRankForgetGate): the forget gate
//    is the safe one, g = kda_lower_bound * sigmoid(exp(A_log) * (f_proj(x) + dt_bias)), unless
//    kda_safe_gate is false (then Kimi's -exp(A_log) * softplus(...)); the output gate is
//    g_proj(x) [C] straight from the layer input.
//  - MLA layers: DeepSeek V3's (interleaved rope, theta 6e6 by default; q_proj or query LoRA)
//    with a per-head output gate sigmoid(g_proj(x)) [H] on each head's output before o_proj
//    (AttentionWeights::gate_proj of width 1, exact in both MLA forms).
//  - Which layers are which: layer_types, else full attention at (l + 1) % layer_group_size == 0.
//    Dense MLP in the first first_k_dense_replace layers (or per mlp_layer_types), MoE after.
//  - Config keys under Ling's names (num_experts, num_experts_per_token, moe_renormalize,
//    num_expert_group, num_shared_experts, model_max_length), read as the DeepSeek ones. The KDA
//    dims: linear_num_heads (else num_attention_heads), linear_head_dim (else head_dim, which in
//    a hub config.json is the KDA head; transformers' own config.json states linear_head_dim and
//    overwrites head_dim with qk_rope_head_dim), linear_conv_kernel_dim (else
//    short_conv_kernel_size).
//  - Tensors under the hub's names (what save_pretrained writes; transformers renames them at
//    load): model.word_embeddings, layers.L.attention.{q,k,v}_proj, {q,k,v}_conv1d, A_log,
//    dt_bias, f_proj, b_proj, g_proj, o_norm, dense on KDA layers; attention.{q_proj | q_a_proj,
//    q_a_layernorm, q_b_proj}, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, dense, g_proj on
//    MLA layers; mlp.gate.{weight, expert_bias}, mlp.experts.E.*, mlp.shared_experts.* on MoE
//    layers. The MTP layers stored after num_hidden_layers are not loaded.
// KDA layers keep per-sequence state (kda.conv, kda.state, kda.block rows), so the engine gives
// each running sequence a state slot and refuses prefix-cache hits on this family.
#include "model/arch/registry.h"
#include "model/deepseek_model.h"
#include "model/hybrid_kda_model.h"
#include "model/kda_attention.h"

namespace latent::model {
namespace {

// transformers' BailingHybridConfig defaults.
ArchDefaults Defaults() {
  ArchDefaults d;
  d.first_k_dense_replace = 2;
  d.n_group = 8;
  d.topk_group = 4;
  d.n_shared_experts = 1;
  d.routed_scaling_factor = 2.5;
  d.norm_topk_prob = true;
  d.topk_methods = {TopkMethod::kNoauxTc};
  d.scoring = ScoringFunc::kSigmoid;
  d.max_position_embeddings = 262144;
  d.bos = std::nullopt;
  d.eos = 156895;
  return d;
}

constexpr double kDefaultRopeTheta = 6000000.0;

// Ling's names for the common keys (transformers' attribute_map), read as the DeepSeek ones; a
// file stating both must agree.
void Prepare(Json& json, const std::string& source) {
  static const std::pair<const char*, const char*> kAliases[] = {
      {"num_experts", "n_routed_experts"},
      {"num_local_experts", "n_routed_experts"},
      {"num_experts_per_token", "num_experts_per_tok"},
      {"moe_renormalize", "norm_topk_prob"},
      {"num_expert_group", "n_group"},
      {"num_shared_experts", "n_shared_experts"},
      {"model_max_length", "max_position_embeddings"},
  };
  for (const auto& [alias, key] : kAliases) {
    if (!json.contains(alias) || json[alias].is_null()) continue;
    if (json.contains(key) && !json[key].is_null() && json[key] != json[alias]) {
      Fail(source, ": '", alias, "' (", json[alias].dump(), ") and '", key, "' (", json[key].dump(),
           ") disagree");
    }
    json[key] = json[alias];
  }
  // Every layer past the dense ones is MoE in this class: the expert count is a dimension, so it
  // must be stated (transformers would silently take 512).
  if (!json.contains("n_routed_experts") || json["n_routed_experts"].is_null()) {
    Fail(source, ": bailing_hybrid needs 'num_experts' (the routed experts per MoE layer)");
  }
  if (!json.contains("q_lora_rank")) json["q_lora_rank"] = nullptr;  // the class default
  // The class's rope_theta default, unless the rope settings state one.
  const bool stated = json.contains("rope_theta") ||
                      (json.contains("rope_parameters") && json["rope_parameters"].is_object() &&
                       json["rope_parameters"].contains("rope_theta"));
  if (!stated) json["rope_theta"] = kDefaultRopeTheta;
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  const int64_t layers = config.num_hidden_layers;
  // transformers' __post_init__ sets linear_* from head_dim, num_attention_heads and
  // short_conv_kernel_size; linear_* keys stated in the file win.
  config.linear_num_heads = top.IntOr("linear_num_heads", config.num_attention_heads);
  config.linear_head_dim = top.IntOr("linear_head_dim", top.IntOr("head_dim", 128));
  config.linear_conv_kernel =
      top.IntOr("linear_conv_kernel_dim", top.IntOr("short_conv_kernel_size", 4));
  if (config.linear_head_dim <= 0 || config.linear_num_heads <= 0 ||
      config.linear_conv_kernel < 2) {
    Fail(source, ": linear attention needs positive head_dim and num_heads and a kernel of at ",
         "least 2 taps, got ",
         config.linear_head_dim, ", ", config.linear_num_heads, ", ", config.linear_conv_kernel);
  }
  if (top.BoolOr("kda_safe_gate", true)) {
    const double bound = top.NumberOr("kda_lower_bound", -5.0);
    if (!(bound < 0)) {
      Fail(source, ": 'kda_lower_bound' must be negative (a log-decay), got ", bound);
    }
    config.linear_gate_lower_bound = bound;
  }
  if (top.Has("layer_types")) {
    config.linear_attention_layers =
        ParseLayerKinds(top, "layer_types", layers, "full_attention", "linear_attention");
  } else {
    const int64_t group = top.IntOr("layer_group_size", 6);
    if (group <= 0) Fail(source, ": 'layer_group_size' must be positive, got ", group);
    for (int64_t l = 0; l < layers; ++l) {
      config.linear_attention_layers.push_back((l + 1) % group != 0);
    }
  }
}

template <class T>
TensorTarget To(T* p) {
  return p != nullptr ? TensorTarget{p} : TensorTarget{};
}

class Tensors {
 public:
  Tensors(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w, const TensorVisitor& visit)
      : c_(c), layout_(layout), w_(w), visit_(visit), t_(c, layout, w, visit) {}

  void All() {
    Add("model.word_embeddings.weight", {c_.vocab_size, c_.hidden_size}, WeightKind::kEmbedding,
        QuantizeRule::kKeep, To(w_ ? &w_->embed : nullptr));
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      t_.InputNorm(l);
      const std::string a = StrCat("model.layers.", l, ".attention.");
      c_.IsLinearAttentionLayer(l) ? Kda(l, a) : Mla(l, a);
      t_.PostAttentionNorm(l);
      c_.IsMoeLayer(l) ? Moe(l) : t_.DenseMlp(l);
    }
    t_.FinalNorm();
    t_.LmHead();
  }

 private:
  LayerWeights* Layer(int64_t l) const { return w_ ? &w_->layers[l] : nullptr; }
  void Add(std::string name, Shape shape, WeightKind kind, QuantizeRule rule, TensorTarget target) {
    visit_(ExpectedWeight{std::move(name), std::move(shape), kind, rule, target,
                          Presence::kRequired, expert_});
  }
  void Linear(const std::string& name, Shape shape, kernels::WeightRef* target,
              QuantizeRule rule = QuantizeRule::kWeightsAndActivations) {
    Add(name, std::move(shape), WeightKind::kLinear, rule, To(target));
  }
  void Norm(const std::string& name, int64_t d, NormWeight* target) {
    Add(name, {d}, WeightKind::kNorm, QuantizeRule::kKeep, To(target));
  }
  // Small f32 parameters (convolution taps, gate constants), kept as stored like a router.
  void F32(const std::string& name, Shape shape, std::vector<float>* target) {
    Add(name, std::move(shape), WeightKind::kRouter, QuantizeRule::kKeep, To(target));
  }

  void Kda(int64_t l, const std::string& a) {
    ops::KdaWeights* k = Layer(l) ? &Layer(l)->kda.emplace() : nullptr;
    ops::KdaFullRankGateWeights* f = k ? &k->forget_full.emplace() : nullptr;
    if (f != nullptr && c_.linear_gate_lower_bound) {
      f->safe_lower_bound = static_cast<float>(*c_.linear_gate_lower_bound);
    }
    const int64_t d = c_.hidden_size, h = c_.linear_num_heads, dk = c_.linear_head_dim, ch = h * dk;
    const int64_t taps = c_.linear_conv_kernel;
    Linear(a + "q_proj.weight", {ch, d}, k ? &k->q : nullptr);
    Linear(a + "k_proj.weight", {ch, d}, k ? &k->k : nullptr);
    Linear(a + "v_proj.weight", {ch, d}, k ? &k->v : nullptr);
    F32(a + "q_conv1d.weight", {ch, 1, taps}, k ? &k->q_conv : nullptr);
    F32(a + "k_conv1d.weight", {ch, 1, taps}, k ? &k->k_conv : nullptr);
    F32(a + "v_conv1d.weight", {ch, 1, taps}, k ? &k->v_conv : nullptr);
    F32(a + "A_log", {h}, f ? &f->a_log : nullptr);
    F32(a + "dt_bias", {ch}, f ? &f->dt_bias : nullptr);
    Linear(a + "f_proj.weight", {ch, d}, f ? &f->f : nullptr);
    Linear(a + "b_proj.weight", {h, d}, k ? &k->b : nullptr);
    Linear(a + "g_proj.weight", {ch, d}, k ? &k->g_full.emplace() : nullptr);
    Norm(a + "o_norm.weight", dk, k ? &k->o_norm : nullptr);
    Linear(a + "dense.weight", {d, ch}, k ? &k->o : nullptr);
  }

  // DeepSeek V3's MLA under the hub's names, plus the per-head output gate.
  void Mla(int64_t l, const std::string& a) {
    const int64_t h = c_.num_attention_heads, d = c_.hidden_size;
    AttentionWeights* w = Layer(l) ? &Layer(l)->attention : nullptr;
    if (c_.q_lora_rank) {
      const int64_t q = *c_.q_lora_rank;
      Linear(a + "q_a_proj.weight", {q, d}, w ? &w->q_a.emplace() : nullptr);
      Norm(a + "q_a_layernorm.weight", q, w ? &w->q_a_norm : nullptr);
      Linear(a + "q_b_proj.weight", {h * c_.qk_head_dim(), q}, w ? &w->q_b.emplace() : nullptr);
    } else {
      Linear(a + "q_proj.weight", {h * c_.qk_head_dim(), d}, w ? &w->q_proj.emplace() : nullptr);
    }
    Linear(a + "kv_a_proj_with_mqa.weight", {c_.kv_lora_rank + c_.qk_rope_head_dim, d},
           w ? &w->kv_a : nullptr);
    Norm(a + "kv_a_layernorm.weight", c_.kv_lora_rank, w ? &w->kv_a_norm : nullptr);
    // kv_b's inputs stay f32 under w8a8, as for every family.
    Linear(a + "kv_b_proj.weight", {h * (c_.qk_nope_head_dim + c_.v_head_dim), c_.kv_lora_rank},
           w ? &w->kv_b : nullptr, QuantizeRule::kWeights);
    Linear(a + "dense.weight", {d, h * c_.v_head_dim}, w ? &w->o : nullptr);
    Linear(a + "g_proj.weight", {h, d}, w ? &w->gate_proj.emplace() : nullptr);
  }

  void Mlp(const std::string& p, int64_t inter, ops::MlpWeights* w) {
    const int64_t d = c_.hidden_size;
    Linear(p + "gate_proj.weight", {inter, d}, w ? &w->gate : nullptr);
    Linear(p + "up_proj.weight", {inter, d}, w ? &w->up : nullptr);
    Linear(p + "down_proj.weight", {d, inter}, w ? &w->down : nullptr);
  }

  // DeepSeek V3's MoE; the router's correction bias is the hub's gate.expert_bias.
  void Moe(int64_t l) {
    const std::string p = StrCat("model.layers.", l, ".mlp.");
    const int64_t e = c_.n_routed_experts, i = c_.moe_intermediate_size, d = c_.hidden_size;
    MoeWeights* m = Layer(l) ? &Layer(l)->moe.emplace() : nullptr;
    if (m != nullptr) m->experts.resize(e);
    Add(p + "gate.weight", {e, d}, WeightKind::kRouter, QuantizeRule::kKeep,
        To(m ? &m->router : nullptr));
    Add(p + "gate.expert_bias", {e}, WeightKind::kBuffer, QuantizeRule::kKeep,
        To(m ? &m->bias : nullptr));
    if (layout_ == ExpertLayout::kPerExpert) {
      for (int64_t x = 0; x < e; ++x) {
        expert_ = x;
        Mlp(StrCat(p, "experts.", x, "."), i, m ? &m->experts[x] : nullptr);
      }
      expert_ = -1;
    } else {
      const auto fused = [&](bool gate_up) {
        return m ? TensorTarget{FusedExperts{&m->experts, gate_up}} : TensorTarget{};
      };
      Add(p + "experts.gate_up_proj", {e, 2 * i, d}, WeightKind::kExperts,
          QuantizeRule::kWeightsAndActivations, fused(true));
      Add(p + "experts.down_proj", {e, d, i}, WeightKind::kExperts,
          QuantizeRule::kWeightsAndActivations, fused(false));
    }
    if (c_.n_shared_experts > 0) {
      Mlp(p + "shared_experts.", i * c_.n_shared_experts, m ? &m->shared.emplace() : nullptr);
    }
  }

  const ModelConfig& c_;
  ExpertLayout layout_;
  DeepseekWeights* w_;
  const TensorVisitor& visit_;
  DeepseekTensors t_;
  int64_t expert_ = -1;  // The routed expert being listed (ExpectedWeight::expert), else -1.
};

void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w,
                   const TensorVisitor& visit) {
  Tensors(c, layout, w, visit).All();
}

// MLA layers cache their latent row; KDA layers keep per-sequence state.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  cache::ModelCacheRows rows(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.IsLinearAttentionLayer(l)) {
      rows[l] = KdaStateRows(c);
    } else {
      rows[l].push_back(MlaLatentRow(c, dtype));
    }
  }
  return rows;
}

class BailingHybrid final : public HybridKdaModel {
 public:
  BailingHybrid(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : HybridKdaModel(std::move(config), std::move(ckpt), ForEachTensor, options,
                       KdaForgetGateKind::kFullRank) {}
};

Arch Make() {
  Arch arch;
  arch.name = "bailing_hybrid";
  arch.model_types = {"bailing_hybrid"};
  arch.defaults = Defaults();
  arch.prepare = Prepare;
  arch.parse = Parse;
  arch.tensors = [](const ModelConfig& c, ExpertLayout layout, const TensorVisitor& visit) {
    ForEachTensor(c, layout, nullptr, visit);
  };
  arch.cache_rows = CacheRows;
  arch.create = [](ModelConfig config, weights::Checkpoint ckpt,
                   const LoadOptions& options) -> std::unique_ptr<Model> {
    return std::make_unique<BailingHybrid>(std::move(config), std::move(ckpt), options);
  };
  return arch;
}

}  // namespace

LATENT_ARCH(180, Make);

}  // namespace latent::model
