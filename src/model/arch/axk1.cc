// A.X-K1 (axk1, SK Telecom): DeepSeek V3 (MLA with a query LoRA, sigmoid noaux_tc router with
// shared experts) plus one RMSNorm, post_mlp_layernorm, on the MoE output of sparse layers after
// the shared experts are added. Released checkpoints also store that norm on dense layers, where
// transformers drops it, and may route without e_score_correction_bias (then zeros).
#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

// transformers' AXK1Config defaults (DeepseekV3Config's, with its own sizes and token ids).
ArchDefaults Defaults() {
  ArchDefaults d;
  d.first_k_dense_replace = 1;  // AXK1Config.__post_init__'s legacy default
  d.n_group = 8;
  d.topk_group = 4;
  d.n_shared_experts = 1;
  d.routed_scaling_factor = 2.5;
  d.norm_topk_prob = true;
  d.topk_methods = {TopkMethod::kNoauxTc};
  d.scoring = ScoringFunc::kSigmoid;
  d.max_position_embeddings = 32768;
  d.bos = 163691;
  d.eos = 163691;
  return d;
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  config.rope_interleave = top.BoolOr("rope_interleave", true);
  // AXK1Attention always builds q_a_proj / q_b_proj.
  if (!config.q_lora_rank) {
    Fail(top.source(), ": axk1 needs q_lora_rank (its attention always has a query LoRA)");
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
    if (c.IsMoeLayer(l)) {
      t.Moe(l, /*score_bias=*/Presence::kOptional);
    } else {
      t.DenseMlp(l);
    }
    t.PostMlpNorm(l, /*used=*/c.IsMoeLayer(l));
  }
  t.FinalNorm();
  t.LmHead();
}

// Every layer caches its MLA latent row.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  return cache::ModelCacheRows(c.num_hidden_layers, {MlaLatentRow(c, dtype)});
}

class Axk1 final : public DeepseekModel {
 public:
  Axk1(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
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
      if (config().IsMoeLayer(l)) {
        // post_mlp_layernorm of the MoE output (routed + shared experts); normed is free again.
        RmsNorm(a.branch.data(), a.tokens, layer(l).post_mlp_norm, a.normed.data());
        a.branch.swap(a.normed);
      }
      AddResidual(a.hidden.data(), a.branch.data(), a.tokens);
      dump::Tensor("hidden", l, a.hidden.data(), a.tokens, config().hidden_size);
    }
    Head(batch, a.hidden.data(), logits);
  }
};

Arch Make() {
  Arch arch;
  arch.name = "axk1";
  arch.model_types = {"axk1"};
  arch.defaults = Defaults();
  arch.parse = Parse;
  arch.tensors = [](const ModelConfig& c, ExpertLayout layout, const TensorVisitor& visit) {
    ForEachTensor(c, layout, nullptr, visit);
  };
  arch.cache_rows = CacheRows;
  arch.create = [](ModelConfig config, weights::Checkpoint ckpt,
                   const LoadOptions& options) -> std::unique_ptr<Model> {
    return std::make_unique<Axk1>(std::move(config), std::move(ckpt), options);
  };
  return arch;
}

}  // namespace

LATENT_ARCH(63, Make);

}  // namespace latent::model
