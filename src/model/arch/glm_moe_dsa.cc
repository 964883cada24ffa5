// GLM-5 (glm_moe_dsa): DeepSeek V3.2's layout with interleaved rotary pairs in the indexer too, and
// IndexShare: layers marked "shared" have no indexer (no weights, no cached index key) and reuse
// the selection of the layer before.
#include <algorithm>

#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

// transformers' GlmMoeDsaConfig defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 3, .n_group = 1, .topk_group = 1, .n_shared_experts = 1,
          .routed_scaling_factor = 2.5, .norm_topk_prob = true,
          .topk_methods = {TopkMethod::kNoauxTc}, .scoring = ScoringFunc::kSigmoid,
          .max_position_embeddings = 202752, .rms_norm_eps = 1e-5, .bos = 0, .eos = 1};
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  config.rope_interleave = true;  // Always adjacent pairs in the MLA; no rope_interleave field.
  ParseIndexedLayerTypes(top, config);
  ParseDsaIndexer(top, config, /*default_heads=*/32);
  ParseIndexShare(top, config);
}

// Every tensor, in checkpoint order; with `w`, where each one loads.
void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w,
                   const TensorVisitor& visit) {
  DeepseekTensors t(c, layout, w, visit);
  t.Embedding();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    t.InputNorm(l);
    t.MlaAttention(l);
    if (c.HasIndexer(l)) t.DsaIndexer(l);
    t.PostAttentionNorm(l);
    c.IsMoeLayer(l) ? t.Moe(l) : t.DenseMlp(l);
  }
  t.FinalNorm();
  t.LmHead();
}

// Every layer caches its MLA latent row; a layer with its own indexer also caches its key.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  cache::ModelCacheRows rows(c.num_hidden_layers, {MlaLatentRow(c, dtype)});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.HasIndexer(l)) rows[l].push_back(DsaIndexKeyRow(c, dtype));
  }
  return rows;
}

// Its Forward is DeepseekModel\'s plain pre-norm decoder.
class GlmMoeDsa final : public DeepseekModel {
 public:
  GlmMoeDsa(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options,
                      /*index_rope_interleaved=*/true) {}
};

Arch Make() {
  return WithModel<GlmMoeDsa, ForEachTensor>(
      {.name = "glm_moe_dsa", .model_types = {"glm_moe_dsa"},
       .tool_call_formats = {{"glm_moe_dsa", "glm45"}}, .defaults = Defaults(), .parse = Parse,
       .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(40, Make);

}  // namespace latent::model
