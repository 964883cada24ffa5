// The DeepSeek-like decoder that the families in arch/ are built from: it owns the weights (loaded
// through the family's tensor list), the rotary tables, and the blocks each family's Forward
// composes (embedding, RMSNorm, MLA attention with or without the DSA indexer, dense MLP or MoE,
// residual, final norm and LM head). What differs between families (config quirks, tensor list,
// cache rows, the composition itself) lives in their arch file.
#pragma once

#include <cstdint>
#include <vector>

#include "model/deepseek_tensors.h"
#include "model/deepseek_weights.h"
#include "model/dsa_indexer.h"
#include "model/mla_attention.h"
#include "model/model.h"
#include "ops/moe.h"
#include "ops/rope.h"
#include "weights/checkpoint.h"

namespace latent::model {

class DeepseekModel : public Model {
 public:
  const ModelConfig& config() const override { return config_; }
  Precision precision() const override { return weights_.precision; }
  // LongRoPE: prompts longer than its original length (long frequencies) apart from the others.
  uint64_t PrefixCacheSalt(int64_t prompt_len) const override;

 protected:
  // `tensors`: the family's tensor list. `index_rope_interleaved`: the DSA indexer's rotary pairing
  // (the attention's follows config.rope_interleave).
  DeepseekModel(ModelConfig config, weights::Checkpoint ckpt, DeepseekTensorList tensors,
                const LoadOptions& options, bool index_rope_interleaved = false);

  // Per forward pass: the residual stream and two scratch rows per token, [T, D] each.
  struct Activations {
    int64_t tokens = 0;
    std::vector<float> hidden, normed, branch;
  };
  Activations Start(const ForwardBatch& batch) const;

  const LayerWeights& layer(int64_t l) const { return weights_.layers[l]; }
  const DeepseekWeights& weights() const { return weights_; }
  // NoPE attention that keeps the rotary part of the heads and the latent unrotated (Kimi
  // Linear): every rotation becomes the identity (zero frequencies: cos 1, sin 0, exact).
  void DisableRotation();

  // hidden [T, D] = the embedding rows of the batch's tokens.
  void Embed(const ForwardBatch& batch, float* hidden) const;
  // out [T, D] = RMSNorm(x) with the config's rms_norm_eps.
  void RmsNorm(const float* x, int64_t tokens, const NormWeight& w, float* out) const;
  // out [T, D] = MLA attention of layer `l` over x [T, D] (after input_layernorm); with `dsa`,
  // restricted to what the DSA indexer selected (run here when the layer has its own indexer,
  // else the selection the previous layer left). `query_scale` [T]: see MlaAttentionForward.
  void MlaAttention(int64_t l, const ForwardBatch& batch, const float* x,
                    AttentionForm form, DsaSelection* dsa, float* out,
                    const float* query_scale = nullptr) const;
  // out [T, D] = the layer's dense MLP or MoE over x [T, D]; the MoE's choices go to `trace`.
  void FeedForward(int64_t l, const float* x, int64_t tokens, float* out, ForwardTrace* trace) const;
  // LongCat's blocks, whose layers hold two MLA sublayers and a slot with both an MLP and a MoE:
  // out [T, D] = MLA attention with the weights of slot `slot`, caching its latent rows as row
  // `cache_row` of cache layer `cache_layer`.
  void MlaAttentionAt(int64_t slot, int64_t cache_layer, int cache_row, const ForwardBatch& batch,
                      const float* x, AttentionForm form, float* out) const;
  // out [T, D] = the dense MLP of slot `slot` over x [T, D].
  void DenseMlp(int64_t slot, const float* x, int64_t tokens, float* out) const;
  // out [T, D] = the MoE of slot `slot` over x [T, D]; its choices go to trace->experts[layer].
  void Moe(int64_t slot, int64_t layer, const float* x, int64_t tokens, float* out,
           ForwardTrace* trace) const;
  // hidden += branch, [T, D].
  void AddResidual(float* hidden, const float* branch, int64_t tokens) const;
  // logits [R, V] = lm_head(RMSNorm(hidden[batch.logits_rows]) / hidden_divisor), soft-capped
  // (cap * tanh(logits / cap)) when config.final_logit_softcapping is set.
  void Head(const ForwardBatch& batch, const float* hidden, float* logits,
            float hidden_divisor = 1.0f) const;

 private:
  // Layer `l`'s MLA dims: a NoPE layer rotates nothing, its heads all nope dims.
  MlaDims LayerDims(int64_t l) const;

  ModelConfig config_;
  weights::Checkpoint ckpt_;  // Owns the mapped files the weight views point into.
  DeepseekWeights weights_;
  MlaDims dims_;
  // Per layer, the index of its mla.latent and dsa.index_k rows in the family's CacheRows (-1:
  // none), so layers of one model may cache different rows (KV sharing, shared indexers).
  std::vector<int> latent_rows_, index_rows_;
  ops::MoeDims moe_dims_;
  // Expert parallelism: sums the ranks' routed-expert outputs (empty: this process holds all).
  ops::SumPartials sum_partials_;
  ops::Rope rope_;
  ops::Rope index_rope_;  // DSA models only.
};

}  // namespace latent::model
