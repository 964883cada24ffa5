// GLM-4.7-Flash (glm4_moe_lite): DeepSeek V3's MLA and noaux_tc sigmoid router, with the dense
// and MoE layers placed by mlp_layer_types (default: dense first, MoE after) and rms eps 1e-5.
// The checkpoint's MTP layer (model.layers.<num_hidden_layers>.*) is not loaded, as transformers
// ignores it.
#include <cmath>

#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

// transformers' Glm4MoeLiteConfig defaults (GLM-4.7-Flash).
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 1,
          .null_first_dense = NullFirstDense::kIgnored,  // the class never reads it
          .n_group = 1, .topk_group = 1, .n_shared_experts = 1,
          .routed_scaling_factor = 1.8, .norm_topk_prob = true,
          .topk_methods = {TopkMethod::kNoauxTc}, .scoring = ScoringFunc::kSigmoid,
          .max_position_embeddings = 202752, .rms_norm_eps = 1e-5, .bos = 0, .eos = 1};
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  config.rope_interleave = top.BoolOr("rope_interleave", true);
  // Without mlp_layer_types transformers makes layer 0 dense and every later one MoE, whatever
  // first_k_dense_replace says (Glm4MoeLiteConfig has no such field).
  if (!top.Has("mlp_layer_types")) {
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) config.moe_layers[l] = l >= 1;
    if (config.n_routed_experts == 0 && config.num_hidden_layers > 1) {
      Fail(source, ": glm4_moe_lite layers after the first are MoE (no mlp_layer_types), but "
           "n_routed_experts is 0");
    }
  }
  // The rotary frequencies span int(head_dim * partial_rotary_factor) dims, head_dim being
  // qk_rope_head_dim here; they must cover the rotary part exactly, as transformers' MLA rope
  // (which fails on anything else) requires.
  double partial = top.NumberOr("partial_rotary_factor", 1.0);
  if (top.Has("rope_parameters") && top["rope_parameters"].is_object()) {
    partial = ConfigReader(top["rope_parameters"], source + " rope_parameters")
                  .NumberOr("partial_rotary_factor", partial);
  }
  const auto rotary = static_cast<int64_t>(static_cast<double>(config.qk_rope_head_dim) * partial);
  if (rotary != config.qk_rope_head_dim) {
    Fail(source, ": partial_rotary_factor ", partial, " rotates ", rotary, " of the ",
         config.qk_rope_head_dim, " qk_rope_head_dim dims; glm4_moe_lite's MLA rope needs all "
         "of them (transformers fails on this config too)");
  }
}

// Every tensor, in checkpoint order; with `w`, where each one loads.
void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w,
                   const TensorVisitor& visit) {
  DeepseekTensors t(c, layout, w, visit);
  t.Embedding();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    t.InputNorm(l);
    t.MlaAttention(l);
    t.PostAttentionNorm(l);
    c.IsMoeLayer(l) ? t.Moe(l) : t.DenseMlp(l);
  }
  t.FinalNorm();
  t.LmHead();
}

// Every layer caches its MLA latent row.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  return cache::ModelCacheRows(c.num_hidden_layers, {MlaLatentRow(c, dtype)});
}

// Its Forward is DeepseekModel\'s plain pre-norm decoder.
class Glm4MoeLite final : public DeepseekModel {
 public:
  Glm4MoeLite(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options) {}
};

Arch Make() {
  return WithModel<Glm4MoeLite, ForEachTensor>(
      {.name = "glm4_moe_lite", .model_types = {"glm4_moe_lite"},
       .tool_call_formats = {{"glm4_moe_lite", "glm45"}}, .defaults = Defaults(), .parse = Parse,
       .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(60, Make);

}  // namespace latent::model
