// DeepSeek V2 / V2-Lite (deepseek_v2): MLA with or without a query LoRA (V2-Lite has none), rotary
// through the complex form (adjacent pairs), a softmax router with greedy or group-limited top-k
// and no renormalisation; dense MLP for the first first_k_dense_replace layers, MoE after.
#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

// transformers' DeepseekV2Config defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 0,
          .n_group = std::nullopt,  // group_limited_greedy needs n_group and topk_group stated
          .topk_group = std::nullopt, .n_shared_experts = 2, .routed_scaling_factor = 1.0,
          .norm_topk_prob = false,
          .topk_methods = {TopkMethod::kGreedy, TopkMethod::kGroupLimitedGreedy},
          .scoring = ScoringFunc::kSoftmax, .max_position_embeddings = 2048,
          .rms_norm_eps = 1e-6, .bos = 1, .eos = 2};
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  // V2 rotates adjacent pairs through its complex form and has no rope_interleave field.
  config.rope_interleave = true;
  if (config.n_routed_experts > 0 && config.norm_topk_prob) {
    // transformers' V2 router never renormalises; refuse rather than silently disagree.
    Fail(top.source(), ": norm_topk_prob true is not supported for deepseek_v2 (transformers ignores it)");
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
class DeepseekV2 final : public DeepseekModel {
 public:
  DeepseekV2(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options) {}
};

Arch Make() {
  return WithModel<DeepseekV2, ForEachTensor>(
      {.name = "deepseek_v2", .model_types = {"deepseek_v2"}, .defaults = Defaults(),
       .prepare = IgnoreMlpLayerTypes, .parse = Parse, .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(10, Make);

}  // namespace latent::model
