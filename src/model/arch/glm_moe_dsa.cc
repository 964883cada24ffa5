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
  ArchDefaults d;
  d.first_k_dense_replace = 3;
  d.n_group = 1;
  d.topk_group = 1;
  d.n_shared_experts = 1;
  d.routed_scaling_factor = 2.5;
  d.norm_topk_prob = true;
  d.topk_methods = {TopkMethod::kNoauxTc};
  d.scoring = ScoringFunc::kSigmoid;
  d.max_position_embeddings = 202752;
  d.bos = 0;
  d.eos = 1;
  return d;
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  config.rope_interleave = true;  // Always adjacent pairs in the MLA; no rope_interleave field.
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

class GlmMoeDsa final : public DeepseekModel {
 public:
  GlmMoeDsa(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options,
                      /*index_rope_interleaved=*/true) {}

  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override {
    LATENT_PROFILE_SCOPE(kStep);
    Activations a = Start(batch);
    Embed(batch, a.hidden.data());
    // [T] the positions each token attends to: from the layer's own indexer, or on a shared layer
    // the previous layer's.
    DsaSelection selection;
    if (trace != nullptr) trace->selected.assign(config().num_hidden_layers, {});
    for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
      RmsNorm(a.hidden.data(), a.tokens, layer(l).input_norm, a.normed.data());
      MlaAttention(l, batch, a.normed.data(), form, &selection, a.branch.data());
      if (trace != nullptr) trace->selected[l] = selection;
      AddResidual(a.hidden.data(), a.branch.data(), a.tokens);
      RmsNorm(a.hidden.data(), a.tokens, layer(l).post_attention_norm, a.normed.data());
      FeedForward(l, a.normed.data(), a.tokens, a.branch.data(), trace);
      AddResidual(a.hidden.data(), a.branch.data(), a.tokens);
      dump::Tensor("hidden", l, a.hidden.data(), a.tokens, config().hidden_size);
    }
    Head(batch, a.hidden.data(), logits);
  }
};

Arch Make() {
  Arch arch;
  arch.name = "glm_moe_dsa";
  arch.model_types = {"glm_moe_dsa"};
  arch.defaults = Defaults();
  arch.parse = Parse;
  arch.tensors = [](const ModelConfig& c, ExpertLayout layout, const TensorVisitor& visit) {
    ForEachTensor(c, layout, nullptr, visit);
  };
  arch.cache_rows = CacheRows;
  arch.create = [](ModelConfig config, weights::Checkpoint ckpt,
                   const LoadOptions& options) -> std::unique_ptr<Model> {
    return std::make_unique<GlmMoeDsa>(std::move(config), std::move(ckpt), options);
  };
  return arch;
}

}  // namespace

LATENT_ARCH(40, Make);

}  // namespace latent::model
