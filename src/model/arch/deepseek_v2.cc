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
  ArchDefaults d;
  d.first_k_dense_replace = 0;
  d.n_group = std::nullopt;  // group_limited_greedy needs n_group and topk_group stated
  d.topk_group = std::nullopt;
  d.n_shared_experts = 2;
  d.routed_scaling_factor = 1.0;
  d.norm_topk_prob = false;
  d.topk_methods = {TopkMethod::kGreedy, TopkMethod::kGroupLimitedGreedy};
  d.scoring = ScoringFunc::kSoftmax;
  d.max_position_embeddings = 2048;
  d.bos = 1;
  d.eos = 2;
  return d;
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

class DeepseekV2 final : public DeepseekModel {
 public:
  DeepseekV2(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options) {}

  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override {
    LATENT_PROFILE_SCOPE(kStep);
    Activations a = Start(batch);
    Embed(batch, a.hidden.data());
    for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
      RmsNorm(a.hidden.data(), a.tokens, layer(l).input_norm, a.normed.data());
      MlaAttention(l, batch, a.normed.data(), form, /*dsa=*/nullptr, a.branch.data());
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
  arch.name = "deepseek_v2";
  arch.model_types = {"deepseek_v2"};
  arch.defaults = Defaults();
  arch.parse = Parse;
  arch.tensors = [](const ModelConfig& c, ExpertLayout layout, const TensorVisitor& visit) {
    ForEachTensor(c, layout, nullptr, visit);
  };
  arch.cache_rows = CacheRows;
  arch.create = [](ModelConfig config, weights::Checkpoint ckpt,
                   const LoadOptions& options) -> std::unique_ptr<Model> {
    return std::make_unique<DeepseekV2>(std::move(config), std::move(ckpt), options);
  };
  return arch;
}

}  // namespace

LATENT_ARCH(10, Make);

}  // namespace latent::model
