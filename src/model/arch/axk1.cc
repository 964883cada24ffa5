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
  return {.first_k_dense_replace = 1,  // AXK1Config.__post_init__'s legacy default
          // Null fails there only without mlp_layer_types (DeriveMlpLayerTypes refuses it).
          .null_first_dense = NullFirstDense::kFailsWithoutLayerTypes,
          .n_group = 8, .topk_group = 4, .n_shared_experts = 1, .routed_scaling_factor = 2.5,
          .norm_topk_prob = true, .topk_methods = {TopkMethod::kNoauxTc},
          .scoring = ScoringFunc::kSigmoid, .max_position_embeddings = 32768,
          .rms_norm_eps = 1e-6, .bos = 163691, .eos = 163691};
}

// AXK1Config honours moe_layer_freq when it derives mlp_layer_types, as AXK2Config does.
void Prepare(Json& json, const std::string& source) {
  DeriveMlpLayerTypes(json, source, Defaults().first_k_dense_replace);
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
    Embed(batch, a.hidden);
    for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
      RmsNorm(a.hidden, a.tokens, layer(l).input_norm, a.normed);
      MlaAttention(l, batch, a.normed, form, /*dsa=*/nullptr, a.branch);
      AddResidual(a.hidden, a.branch, a.tokens);
      RmsNorm(a.hidden, a.tokens, layer(l).post_attention_norm, a.normed);
      FeedForward(l, a.normed, a.tokens, a.branch, trace);
      if (config().IsMoeLayer(l)) {
        // post_mlp_layernorm of the MoE output (routed + shared experts); normed is free again.
        RmsNorm(a.branch, a.tokens, layer(l).post_mlp_norm, a.normed);
        std::swap(a.branch, a.normed);
      }
      AddResidual(a.hidden, a.branch, a.tokens);
      dump::Tensor("hidden", l, a.hidden, a.tokens, config().hidden_size);
    }
    Head(batch, a.hidden, logits);
  }
};

Arch Make() {
  return WithModel<Axk1, ForEachTensor>(
      {.name = "axk1", .model_types = {"axk1"}, .defaults = Defaults(), .prepare = Prepare,
       .parse = Parse, .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(63, Make);

}  // namespace latent::model
