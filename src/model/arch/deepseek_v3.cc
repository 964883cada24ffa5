// DeepSeek V3 / R1 (deepseek_v3) and Kimi K2 (kimi_k2, the V3 architecture under its own
// model_type): MLA with rotary pairs interleaved or split per `rope_interleave`, a sigmoid router
// with e_score_correction_bias and group-limited (noaux_tc) top-k; dense MLP for the first
// first_k_dense_replace layers, MoE after.
#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

// transformers' DeepseekV3Config defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 3, .n_group = 8, .topk_group = 4, .n_shared_experts = 1,
          .routed_scaling_factor = 2.5, .norm_topk_prob = true,
          .topk_methods = {TopkMethod::kNoauxTc}, .scoring = ScoringFunc::kSigmoid,
          .max_position_embeddings = 4096, .rms_norm_eps = 1e-6, .bos = 0, .eos = 1};
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  // Adjacent rotary pairs (2i, 2i+1) unless rope_interleave is false (then halves).
  config.rope_interleave = top.BoolOr("rope_interleave", true);
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
class DeepseekV3 final : public DeepseekModel {
 public:
  DeepseekV3(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options) {}
};

Arch Make() {
  return WithModel<DeepseekV3, ForEachTensor>(
      {.name = "deepseek_v3", .model_types = {"deepseek_v3", "kimi_k2"},
       // V3 and R1 write V3's or V3.1's markup: their chat template tells which.
       .tool_call_formats = {{"kimi_k2", "kimi_k2"}}, .defaults = Defaults(),
       .prepare = IgnoreMlpLayerTypes, .parse = Parse,
       .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(20, Make);

}  // namespace latent::model
