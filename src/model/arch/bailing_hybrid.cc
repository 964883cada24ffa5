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
#include "model/kda_attention.h"

namespace latent::model {
namespace {

// transformers' BailingHybridConfig defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 2, .n_group = 8, .topk_group = 4, .n_shared_experts = 1,
          .routed_scaling_factor = 2.5, .norm_topk_prob = true,
          .topk_methods = {TopkMethod::kNoauxTc}, .scoring = ScoringFunc::kSigmoid,
          .max_position_embeddings = 262144,
          .rms_norm_eps = 1e-6, .bos = std::nullopt, .eos = 156895};
}

constexpr double kDefaultRopeTheta = 6000000.0;

// Ling's names for the common keys (transformers' attribute_map), read as the DeepSeek ones; a
// file stating both must agree.
void Prepare(Json& json, const std::string& source) {
  ReadMoeKeyAliases(json, source);
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
  CheckLinearAttentionDims(source, config);
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

// The hub's names: word embeddings, attention.* for both layer kinds, the router's correction
// bias as gate.expert_bias.
class Tensors {
 public:
  Tensors(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w, const TensorVisitor& visit)
      : c_(c), w_(w), t_(c, layout, w, visit) {}

  void All() {
    t_.Add("model.word_embeddings.weight", {c_.vocab_size, c_.hidden_size}, WeightKind::kEmbedding,
           QuantizeRule::kKeep, w_ ? TensorTarget{&w_->embed} : TensorTarget{});
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      const std::string p = StrCat("model.layers.", l, ".");
      t_.InputNorm(l);
      c_.IsLinearAttentionLayer(l) ? Kda(l, p + "attention.") : Mla(l, p + "attention.");
      t_.PostAttentionNorm(l);
      if (c_.IsMoeLayer(l)) {
        t_.MoeAt(l, p + "mlp.", {.score_bias = "gate.expert_bias"});
      } else {
        t_.DenseMlp(l);
      }
    }
    t_.FinalNorm();
    t_.LmHead();
  }

 private:
  // KDA with the full-rank forget gate (f_proj) and output gate (g_proj).
  void Kda(int64_t l, const std::string& a) {
    ops::KdaWeights* k = t_.Layer(l) ? &t_.Layer(l)->kda.emplace() : nullptr;
    ops::KdaFullRankGateWeights* f = k ? &k->forget_full.emplace() : nullptr;
    if (f != nullptr && c_.linear_gate_lower_bound) {
      f->safe_lower_bound = static_cast<float>(*c_.linear_gate_lower_bound);
    }
    const int64_t d = c_.hidden_size, h = c_.linear_num_heads, dk = c_.linear_head_dim, ch = h * dk;
    const int64_t taps = c_.linear_conv_kernel;
    t_.Linear(a + "q_proj.weight", {ch, d}, k ? &k->q : nullptr);
    t_.Linear(a + "k_proj.weight", {ch, d}, k ? &k->k : nullptr);
    t_.Linear(a + "v_proj.weight", {ch, d}, k ? &k->v : nullptr);
    t_.F32(a + "q_conv1d.weight", {ch, 1, taps}, k ? &k->q_conv : nullptr);
    t_.F32(a + "k_conv1d.weight", {ch, 1, taps}, k ? &k->k_conv : nullptr);
    t_.F32(a + "v_conv1d.weight", {ch, 1, taps}, k ? &k->v_conv : nullptr);
    t_.F32(a + "A_log", {h}, f ? &f->a_log : nullptr);
    t_.F32(a + "dt_bias", {ch}, f ? &f->dt_bias : nullptr);
    t_.Linear(a + "f_proj.weight", {ch, d}, f ? &f->f : nullptr);
    t_.Linear(a + "b_proj.weight", {h, d}, k ? &k->b : nullptr);
    t_.Linear(a + "g_proj.weight", {ch, d}, k ? &k->g_full.emplace() : nullptr);
    t_.Norm(a + "o_norm.weight", dk, k ? &k->o_norm : nullptr);
    t_.Linear(a + "dense.weight", {d, ch}, k ? &k->o : nullptr);
  }

  // DeepSeek V3's MLA under the hub's names, plus the per-head output gate.
  void Mla(int64_t l, const std::string& a) {
    const int64_t h = c_.num_attention_heads, d = c_.hidden_size;
    AttentionWeights* w = t_.Layer(l) ? &t_.Layer(l)->attention : nullptr;
    if (c_.q_lora_rank) {
      const int64_t q = *c_.q_lora_rank;
      t_.Linear(a + "q_a_proj.weight", {q, d}, w ? &w->q_a.emplace() : nullptr);
      t_.Norm(a + "q_a_layernorm.weight", q, w ? &w->q_a_norm : nullptr);
      t_.Linear(a + "q_b_proj.weight", {h * c_.qk_head_dim(), q}, w ? &w->q_b.emplace() : nullptr);
    } else {
      t_.Linear(a + "q_proj.weight", {h * c_.qk_head_dim(), d}, w ? &w->q_proj.emplace() : nullptr);
    }
    t_.Linear(a + "kv_a_proj_with_mqa.weight", {c_.kv_lora_rank + c_.qk_rope_head_dim, d},
              w ? &w->kv_a : nullptr);
    t_.Norm(a + "kv_a_layernorm.weight", c_.kv_lora_rank, w ? &w->kv_a_norm : nullptr);
    // kv_b's inputs stay f32 under w8a8, as for every family.
    t_.Linear(a + "kv_b_proj.weight", {h * (c_.qk_nope_head_dim + c_.v_head_dim), c_.kv_lora_rank},
              w ? &w->kv_b : nullptr, QuantizeRule::kWeights);
    t_.Linear(a + "dense.weight", {d, h * c_.v_head_dim}, w ? &w->o : nullptr);
    t_.Linear(a + "g_proj.weight", {h, d}, w ? &w->gate_proj.emplace() : nullptr);
  }

  const ModelConfig& c_;
  DeepseekWeights* w_;
  DeepseekTensors t_;
};

void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w,
                   const TensorVisitor& visit) {
  Tensors(c, layout, w, visit).All();
}

// Its Forward is DeepseekModel's plain pre-norm decoder, KDA on the linear-attention layers.
class BailingHybrid final : public DeepseekModel {
 public:
  BailingHybrid(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options) {
    EnableKda(KdaForgetGateKind::kFullRank);
  }
};

Arch Make() {
  return WithModel<BailingHybrid, ForEachTensor>(
      {.name = "bailing_hybrid", .model_types = {"bailing_hybrid"}, .defaults = Defaults(),
       .prepare = Prepare, .parse = Parse, .cache_rows = KdaHybridRows});
}

}  // namespace

LATENT_ARCH(180, Make);

}  // namespace latent::model
