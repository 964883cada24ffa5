// LongCat-Flash (longcat_flash): each of num_layers layers holds two MLA sublayers (each with its
// own cached latent row), two dense SwiGLU MLPs and one shortcut MoE fed from the first
// sublayer's MLP input and added at the end of the layer:
//   h = h + mla0(ln0(h)); a = post0(h); moe = MoE(a); h = h + mlp0(a);
//   h = h + mla1(ln1(h)); h = h + mlp1(post1(h)) + moe
// MLA as DeepSeek V3 (q LoRA, interleaved rope) with LoRA scales: the query times
// sqrt(D / q_lora_rank), the normalised latent times sqrt(D / kv_lora_rank) before caching. The
// router ("classifier") scores E routed plus Z identity ("zero-computation") experts with an f32
// softmax, picks the top k of scores + e_score_correction_bias, weights them by their unbiased
// scores (no renormalisation) times routed_scaling_factor; no shared experts.
//
// latent counts the num_layers logical layers (transformers' num_hidden_layers is 2 * num_layers,
// one per attention sublayer): layer l caches rows mla.latent.0 and mla.latent.1, and its weights
// live in LayerWeights slots 2l (sublayer 0 and the MoE) and 2l + 1 (sublayer 1).
#include <cmath>

#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

constexpr int kSublayers = 2;

// transformers' LongcatFlashConfig defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 0,
          .null_first_dense = NullFirstDense::kIgnored,  // the class never reads it
          .n_group = std::nullopt, .topk_group = std::nullopt,
          .n_shared_experts = 0, .routed_scaling_factor = 6.0, .norm_topk_prob = false,
          .topk_methods = {TopkMethod::kGreedy}, .scoring = ScoringFunc::kSoftmax,
          .max_position_embeddings = 131072, .rms_norm_eps = 1e-5, .bos = 1, .eos = 2};
}

// LongCat's names for the common keys (transformers' attribute_map), copied to the common names
// before they are read; a file stating both must agree. num_layers counts logical layers, which
// is what latent's num_hidden_layers counts for this family.
void Prepare(Json& json, const std::string& source) {
  const ConfigReader top(json, source);
  const int64_t layers = top.PositiveInt("num_layers");
  if (top.Has("num_hidden_layers") && top.Int("num_hidden_layers") != 2 * layers) {
    Fail(source, ": num_hidden_layers (", top.Int("num_hidden_layers"),
         ") must be 2 * num_layers (", 2 * layers, ") for longcat_flash");
  }
  json["num_hidden_layers"] = layers;
  IgnoreMlpLayerTypes(json, source);
  const std::pair<const char*, const char*> aliases[] = {
      {"ffn_hidden_size", "intermediate_size"},
      {"expert_ffn_hidden_size", "moe_intermediate_size"},
      {"moe_topk", "num_experts_per_tok"},
      {"num_local_experts", "n_routed_experts"},
  };
  for (const auto& [own, common] : aliases) {
    if (!top.Has(own)) continue;
    if (top.Has(common) && json[common] != json[own]) {
      Fail(source, ": contradictory '", own, "' (", json[own].dump(), ") and '", common, "' (",
           json[common].dump(), ")");
    }
    json[common] = json[own];
  }
}

bool StatesRopeTheta(const ConfigReader& top) {
  if (top.Has("rope_theta")) return true;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (top.Has(key) && top[key].is_object() && top[key].contains("rope_theta")) return true;
  }
  return false;
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  // Class defaults that differ from the common parser's.
  if (!StatesRopeTheta(top)) config.rope.theta = 1e7;
  config.rope_interleave = true;  // apply_rotary_pos_emb_interleave, always

  if (!config.q_lora_rank) {
    Fail(source, ": longcat_flash needs q_lora_rank (its queries always use a LoRA)");
  }
  if (top.Has("qk_head_dim") && top.Int("qk_head_dim") != config.qk_head_dim()) {
    Fail(source, ": qk_head_dim (", top.Int("qk_head_dim"),
         ") must be qk_nope_head_dim + qk_rope_head_dim (", config.qk_head_dim(), ")");
  }
  // transformers' rotary tables are head_dim wide (default 64) and rotate the qk_rope_head_dim
  // part: the two must agree (its forward fails otherwise).
  if (top.IntOr("head_dim", 64) != config.qk_rope_head_dim) {
    Fail(source, ": head_dim (", top.IntOr("head_dim", 64),
         ", the rotary dim) must equal qk_rope_head_dim (", config.qk_rope_head_dim,
         ") for longcat_flash");
  }
  // transformers applies both scales whatever mla_scale_q_lora / mla_scale_kv_lora say.
  const double d = static_cast<double>(config.hidden_size);
  config.mla_q_scale = std::pow(d / static_cast<double>(*config.q_lora_rank), 0.5);
  config.mla_latent_scale = std::pow(d / static_cast<double>(config.kv_lora_rank), 0.5);

  if (config.n_routed_experts == 0) Fail(source, ": longcat_flash needs n_routed_experts > 0");
  // `zero_expert_num or 0`, as transformers reads it.
  config.zero_expert_num = top.Present("zero_expert_num") ? top.IntOr("zero_expert_num", 0) : 256;
  if (config.zero_expert_num < 0 || config.zero_expert_num > kMaxConfigSize) {
    Fail(source, ": 'zero_expert_num' must be between 0 and ", kMaxConfigSize, ", got ",
         config.zero_expert_num);
  }
  const std::string zero_type = top.StringOr("zero_expert_type", "identity");
  if (zero_type != "identity") {
    Fail(source, ": zero_expert_type '", zero_type, "' is not supported (supported: identity)");
  }
  config.router_bias = top.BoolOr("router_bias", false);
  if (config.norm_topk_prob) {
    Fail(source,
         ": norm_topk_prob true is not supported for longcat_flash (transformers ignores it)");
  }
  if (config.n_shared_experts != 0) {
    Fail(source, ": n_shared_experts must be 0 for longcat_flash (it has no shared experts)");
  }
  // Every layer has the shortcut MoE; transformers reads no dense/sparse layer pattern.
  config.first_k_dense_replace = 0;
  config.moe_layers.assign(config.num_hidden_layers, true);
}

// Every tensor, in checkpoint order; with `w`, where each one loads (slot 2l: sublayer 0 and the
// MoE, slot 2l + 1: sublayer 1).
void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w,
                   const TensorVisitor& visit) {
  DeepseekTensors t(c, layout, w, visit, kSublayers * c.num_hidden_layers);
  t.Embedding();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = StrCat("model.layers.", l, ".");
    const int64_t slot = kSublayers * l;
    t.ZeroExpertMoeAt(slot, p + "mlp.");
    for (int i = 0; i < kSublayers; ++i) {
      t.MlaAttentionAt(slot + i, StrCat(p, "self_attn.", i, "."));
    }
    for (int i = 0; i < kSublayers; ++i) t.DenseMlpAt(slot + i, StrCat(p, "mlps.", i, "."));
    for (int i = 0; i < kSublayers; ++i) {
      t.InputNormAt(slot + i, StrCat(p, "input_layernorm.", i, ".weight"));
    }
    for (int i = 0; i < kSublayers; ++i) {
      t.PostAttentionNormAt(slot + i, StrCat(p, "post_attention_layernorm.", i, ".weight"));
    }
  }
  t.FinalNorm();
  t.LmHead();
}

// Every layer caches the latent rows of its two MLA sublayers: rows 0 and 1.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  std::vector<cache::CacheRowSpec> rows;
  for (int i = 0; i < kSublayers; ++i) {
    cache::CacheRowSpec row = MlaLatentRow(c, dtype);
    row.name = StrCat("mla.latent.", i);
    rows.push_back(row);
  }
  return cache::ModelCacheRows(c.num_hidden_layers, rows);
}

class LongcatFlash final : public DeepseekModel {
 public:
  LongcatFlash(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options) {}

  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override {
    LATENT_PROFILE_SCOPE(kStep);
    Activations a = Start(batch);
    float* moe = a.extra;  // [T, D] the shortcut MoE's output
    float* hidden = a.hidden;
    float* normed = a.normed;
    float* branch = a.branch;
    Embed(batch, hidden);
    for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
      const int64_t s0 = kSublayers * l, s1 = s0 + 1;
      RmsNorm(hidden, a.tokens, layer(s0).input_norm, normed);
      MlaAttentionAt(s0, l, 0, batch, normed, form, branch);
      AddResidual(hidden, branch, a.tokens);
      RmsNorm(hidden, a.tokens, layer(s0).post_attention_norm, normed);
      Moe(s0, l, normed, a.tokens, moe, trace);
      DenseMlp(s0, normed, a.tokens, branch);
      AddResidual(hidden, branch, a.tokens);
      RmsNorm(hidden, a.tokens, layer(s1).input_norm, normed);
      MlaAttentionAt(s1, l, 1, batch, normed, form, branch);
      AddResidual(hidden, branch, a.tokens);
      RmsNorm(hidden, a.tokens, layer(s1).post_attention_norm, normed);
      DenseMlp(s1, normed, a.tokens, branch);
      // (residual + mlp1) + moe, in transformers' order.
      AddResidual(hidden, branch, a.tokens);
      AddResidual(hidden, moe, a.tokens);
      dump::Tensor("hidden", l, hidden, a.tokens, config().hidden_size);
    }
    Head(batch, hidden, logits);
  }
};

Arch Make() {
  return WithModel<LongcatFlash, ForEachTensor>(
      {.name = "longcat_flash", .model_types = {"longcat_flash"}, .defaults = Defaults(),
       .prepare = Prepare, .parse = Parse, .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(110, Make);

}  // namespace latent::model
