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
  ArchDefaults d;
  d.first_k_dense_replace = 3;
  d.n_group = 8;
  d.topk_group = 4;
  d.n_shared_experts = 1;
  d.routed_scaling_factor = 2.5;
  d.norm_topk_prob = true;
  d.topk_methods = {TopkMethod::kNoauxTc};
  d.scoring = ScoringFunc::kSigmoid;
  d.max_position_embeddings = 4096;
  d.bos = 0;
  d.eos = 1;
  return d;
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

class DeepseekV3 final : public DeepseekModel {
 public:
  DeepseekV3(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
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
  arch.name = "deepseek_v3";
  arch.model_types = {"deepseek_v3", "kimi_k2"};
  arch.defaults = Defaults();
  arch.parse = Parse;
  arch.tensors = [](const ModelConfig& c, ExpertLayout layout, const TensorVisitor& visit) {
    ForEachTensor(c, layout, nullptr, visit);
  };
  arch.cache_rows = CacheRows;
  arch.create = [](ModelConfig config, weights::Checkpoint ckpt,
                   const LoadOptions& options) -> std::unique_ptr<Model> {
    return std::make_unique<DeepseekV3>(std::move(config), std::move(ckpt), options);
  };
  return arch;
}

}  // namespace

LATENT_ARCH(20, Make);

}  // namespace latent::model
