// DeepSeek V3.2 (deepseek_v32): V3's MLA (always interleaved rotary pairs) and router, plus DeepSeek
// sparse attention: every layer runs a DSA indexer (half-split rotary pairs) that picks the
// index_topk positions its MLA attends to, and caches the indexer's key next to the latent.
#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

// transformers' DeepseekV32Config defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 3, .n_group = 8, .topk_group = 4, .n_shared_experts = 1,
          .routed_scaling_factor = 2.5, .norm_topk_prob = true,
          .topk_methods = {TopkMethod::kNoauxTc}, .scoring = ScoringFunc::kSigmoid,
          .max_position_embeddings = 163840, .rms_norm_eps = 1e-6, .bos = 0, .eos = 1};
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  config.rope_interleave = true;  // Always adjacent pairs in the MLA; no rope_interleave field.
  ParseIndexedLayerTypes(top, config);
  ParseDsaIndexer(top, config, /*default_heads=*/64);
}

// Every tensor, in checkpoint order; with `w`, where each one loads.
void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w,
                   const TensorVisitor& visit) {
  DeepseekTensors t(c, layout, w, visit);
  t.Embedding();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    t.InputNorm(l);
    t.MlaAttention(l);
    t.DsaIndexer(l);
    t.PostAttentionNorm(l);
    c.IsMoeLayer(l) ? t.Moe(l) : t.DenseMlp(l);
  }
  t.FinalNorm();
  t.LmHead();
}

// Every layer caches its MLA latent row and its indexer's key.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  return cache::ModelCacheRows(c.num_hidden_layers, {MlaLatentRow(c, dtype), DsaIndexKeyRow(c, dtype)});
}

// Its Forward is DeepseekModel\'s plain pre-norm decoder.
class DeepseekV32 final : public DeepseekModel {
 public:
  DeepseekV32(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options,
                      /*index_rope_interleaved=*/false) {}
};

Arch Make() {
  return WithModel<DeepseekV32, ForEachTensor>(
      {.name = "deepseek_v32", .model_types = {"deepseek_v32"},
       .tool_call_formats = {{"deepseek_v32", "deepseek_v32"}}, .defaults = Defaults(),
       .parse = Parse, .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(30, Make);

}  // namespace latent::model
