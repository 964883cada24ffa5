// The DeepSeek-like decoder that the families in arch/ are built from: it owns the weights (loaded
// through the family's tensor list), the rotary tables, and the blocks each family's Forward
// composes (embedding, RMSNorm, MLA attention with or without the DSA indexer, dense MLP or MoE,
// residual, final norm and LM head). What differs between families (config quirks, tensor list,
// cache rows, the composition itself) lives in their arch file.
#pragma once

#include <cstdint>
#include <vector>

#include "base/scratch.h"
#include "model/attention_dims.h"
#include "model/deepseek_tensors.h"
#include "model/deepseek_weights.h"
#include "model/kda_attention.h"
#include "model/model.h"
#include "ops/attention_workspace.h"
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
  // Sizes the workspace below for steps of up to `max_tokens` tokens.
  void Reserve(int64_t max_tokens) override;
  // The plain pre-norm decoder: Embed, then per layer ResidualLayer (with the DSA indexer's
  // selection carried from layer to layer on models that have indexers), then Head. A family
  // whose blocks differ overrides it (or only Attention).
  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override;

 protected:
  // `tensors`: the family's tensor list. `index_rope_interleaved`: the DSA indexer's rotary pairing
  // (the attention's follows config.rope_interleave).
  DeepseekModel(ModelConfig config, weights::Checkpoint ckpt, DeepseekTensorList tensors,
                const LoadOptions& options, bool index_rope_interleaved = false);

  // One step's activations: views into the model's workspace (Reserve), valid until the next
  // step starts.
  struct Activations {
    int64_t tokens = 0;
    float* hidden = nullptr;  // [T, D] the residual stream
    float* normed = nullptr;  // [T, D] scratch
    float* branch = nullptr;  // [T, D] scratch
    // [T, max(hc_mult, 1), D]: the hyper-connection streams, else one more scratch row
    // (LongCat's shortcut MoE output).
    float* extra = nullptr;
  };
  // Validates `batch` and hands out its activations.
  Activations Start(const ForwardBatch& batch) const;

  const LayerWeights& layer(int64_t l) const { return weights_.layers[l]; }
  const DeepseekWeights& weights() const { return weights_; }
  // The attention blocks' memory kept from step to step (ops::MlaAttentionForward's workspace).
  ops::AttentionWorkspace* attention_workspace() const { return &workspace_.attention; }
  // Hybrids: the layers the config marks linear-attention run KDA with the forget gate `gate`.
  void EnableKda(KdaForgetGateKind gate);
  // NoPE attention that keeps the rotary part of the heads and the latent unrotated (Kimi
  // Linear): every rotation becomes the identity (zero frequencies: cos 1, sin 0, exact).
  void DisableRotation();

  // hidden [T, D] = the embedding rows of the batch's tokens.
  void Embed(const ForwardBatch& batch, float* hidden) const;
  // out [T, D] = RMSNorm(x) with the config's rms_norm_eps.
  void RmsNorm(const float* x, int64_t tokens, const NormWeight& w, float* out) const;
  // out [T, D] = MLA attention of layer `l` over x [T, D] (after input_layernorm); with `dsa`,
  // restricted to what the DSA indexer selected (run here when the layer has its own indexer,
  // else the selection the previous layer left). `query_scale` [T]: see ops::MlaAttentionForward.
  void MlaAttention(int64_t l, const ForwardBatch& batch, const float* x,
                    AttentionForm form, DsaSelection* dsa, float* out,
                    const float* query_scale = nullptr) const;
  // out [T, D] = layer l's attention over x [T, D] (after input_layernorm): KDA on a hybrid's
  // linear-attention layers (EnableKda), else MlaAttention (`dsa`, `query_scale`: its), which
  // with `dsa` also records the selection in trace->selected[l] (sized by the caller). A family
  // with attention of its own (dots3_note's per-layer shapes and windows) overrides it.
  virtual void Attention(int64_t l, const ForwardBatch& batch, const float* x, AttentionForm form,
                         DsaSelection* dsa, float* out, ForwardTrace* trace,
                         const float* query_scale) const;
  // One pre-norm layer on the plain residual stream of `a`:
  //   hidden += Attention(RmsNorm(hidden)); hidden += FeedForward(RmsNorm(hidden)).
  void ResidualLayer(int64_t l, const ForwardBatch& batch, AttentionForm form, const Activations& a,
                     DsaSelection* dsa, ForwardTrace* trace,
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
  Activations Start(int64_t tokens) const;
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
  bool has_indexer_ = false;  // Some layer runs a DSA indexer.
  ops::KdaDims kda_dims_;
  KdaForgetGateKind kda_gate_ = KdaForgetGateKind::kKimi;
  // The steps' working memory, sized once by Reserve and reused (one step at a time).
  struct Workspace {
    Scratch<float> hidden, normed, branch, extra;  // Activations
    Scratch<float> head;                           // [R, D] the rows Head reads
    ops::FfnWorkspace ffn;                         // the MLPs' and MoEs'
    ops::AttentionWorkspace attention;             // MLA's and the DSA indexer's
  };
  mutable Workspace workspace_;
};

}  // namespace latent::model
