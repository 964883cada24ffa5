// MiniCPM3 (minicpm3): DeepSeek V2's MLA (query LoRA) with rotate-half (half-split) rope and
// LongRoPE frequencies in a Llama skeleton with muP scalings: the embedding times scale_emb, each
// residual branch times scale_depth / sqrt(num_hidden_layers), the final hidden state divided by
// hidden_size / dim_model_base before the LM head; a dense SiLU MLP in every layer; the LM head
// tied to the embedding by default.
#include <cmath>

#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

// transformers' MiniCPM3Config defaults (MiniCPM3-4B).
ArchDefaults Defaults() {
  // No experts: a config that states some still parses far enough for Parse to refuse it.
  return {.null_first_dense = NullFirstDense::kIgnored,  // every layer dense
          .topk_methods = {TopkMethod::kGreedy}, .max_position_embeddings = 32768,
          .rms_norm_eps = 1e-5, .bos = 1, .eos = 2, .v_head_dim_from_heads = true};
}

// The muP scalings; a null scale_depth or dim_model_base means no scaling (transformers:
// scale_depth = sqrt(L), dim_model_base = hidden_size).
void ParseScalings(const ConfigReader& top, ModelConfig& config) {
  const double layers = static_cast<double>(config.num_hidden_layers);
  config.embedding_scale = top.NumberOr("scale_emb", 12.0);
  const double depth = top.Present("scale_depth") && !top.Has("scale_depth")
                           ? std::sqrt(layers)
                           : top.NumberOr("scale_depth", 1.4);
  config.residual_scale = depth / std::sqrt(layers);
  const double base = top.Present("dim_model_base") && !top.Has("dim_model_base")
                          ? static_cast<double>(config.hidden_size)
                          : top.NumberOr("dim_model_base", 256.0);
  if (!(base > 0)) Fail(top.source(), ": 'dim_model_base' must be positive");
  config.logits_divisor = static_cast<double>(config.hidden_size) / base;
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  // transformers' apply_rotary_pos_emb: the rotary part split in halves.
  config.rope_interleave = false;
  config.tie_word_embeddings = top.BoolOr("tie_word_embeddings", true);
  if (config.n_routed_experts > 0) {
    Fail(top.source(), ": minicpm3 has no experts, but n_routed_experts is ", config.n_routed_experts);
  }
  config.moe_layers.assign(config.num_hidden_layers, false);
  ParseScalings(top, config);
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
    t.DenseMlp(l);
  }
  t.FinalNorm();
  t.LmHead();  // When tied, only a head the checkpoint stores.
}

// Every layer caches its MLA latent row (256 + 32 values for MiniCPM3-4B).
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  return cache::ModelCacheRows(c.num_hidden_layers, {MlaLatentRow(c, dtype)});
}

class MiniCpm3 final : public DeepseekModel {
 public:
  MiniCpm3(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options),
        embed_(static_cast<float>(this->config().embedding_scale)),
        residual_(static_cast<float>(this->config().residual_scale)),
        logits_div_(static_cast<float>(this->config().logits_divisor)) {}

  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override {
    LATENT_PROFILE_SCOPE(kStep);
    Activations a = Start(batch);
    const int64_t n = a.tokens * config().hidden_size;
    Embed(batch, a.hidden);
    for (int64_t i = 0; i < n; ++i) a.hidden[i] *= embed_;
    for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
      RmsNorm(a.hidden, a.tokens, layer(l).input_norm, a.normed);
      MlaAttention(l, batch, a.normed, form, /*dsa=*/nullptr, a.branch);
      for (int64_t i = 0; i < n; ++i) a.branch[i] *= residual_;
      AddResidual(a.hidden, a.branch, a.tokens);
      RmsNorm(a.hidden, a.tokens, layer(l).post_attention_norm, a.normed);
      FeedForward(l, a.normed, a.tokens, a.branch, trace);
      for (int64_t i = 0; i < n; ++i) a.branch[i] *= residual_;
      AddResidual(a.hidden, a.branch, a.tokens);
      dump::Tensor("hidden", l, a.hidden, a.tokens, config().hidden_size);
    }
    Head(batch, a.hidden, logits, logits_div_);
  }

 private:
  float embed_, residual_, logits_div_;  // The muP scalings, as transformers applies them in f32.
};

Arch Make() {
  return WithModel<MiniCpm3, ForEachTensor>(
      {.name = "minicpm3", .model_types = {"minicpm3"}, .defaults = Defaults(),
       .prepare = IgnoreMlpLayerTypes, .parse = Parse,
       .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(90, Make);

}  // namespace latent::model
