#include "model/deepseek_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/dump.h"
#include "base/error.h"
#include "base/profile.h"
#include "kernels/kernel_table.h"
#include "kernels/linear.h"
#include "model/cache_rows.h"
#include "parallel/communicator.h"
#include "threads/thread_pool.h"

namespace latent::model {
namespace {

ops::MoeDims MoeDimsOf(const ModelConfig& c) {
  ops::MoeDims d;
  d.hidden = c.hidden_size;
  d.experts = c.n_routed_experts;
  d.zero_experts = c.zero_expert_num;
  d.top_k = c.num_experts_per_tok;
  d.n_group = c.n_group;
  d.topk_group = c.topk_group;
  d.norm_topk_prob = c.norm_topk_prob;
  d.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
  d.scoring = c.scoring_func;
  d.topk_method = c.topk_method;
  d.dropped_groups_score_zero = c.router_dropped_groups_score_zero;
  d.swiglu_limit = static_cast<float>(c.swiglu_limit);
  d.clamp_shared = c.swiglu_limit_all_mlps;
  return d;
}

}  // namespace

DeepseekModel::DeepseekModel(ModelConfig config, weights::Checkpoint ckpt, DeepseekTensorList tensors,
                             const LoadOptions& options, bool index_rope_interleaved)
    : config_(std::move(config)),
      ckpt_(std::move(ckpt)),
      weights_(LoadDeepseekWeights(config_, ckpt_, tensors, options)),
      dims_(MlaDimsOf(config_)),
      moe_dims_(MoeDimsOf(config_)),
      sum_partials_(options.communicator != nullptr && options.communicator->size() > 1
                        ? ops::SumPartials([comm = options.communicator](float* data, int64_t n) {
                            comm->SumInRankOrder(data, n);
                          })
                        : ops::SumPartials()),
      rope_(ops::Rope::FromConfig(config_.rope, config_.qk_rope_head_dim, config_.qk_head_dim(),
                                  config_.rope_interleave, /*round_bf16=*/false)),
      index_rope_(ops::Rope::FromConfig(config_.rope, config_.qk_rope_head_dim,
                                        config_.qk_head_dim(), index_rope_interleaved,
                                        /*round_bf16=*/false)) {
  // LeRoPE: learned factors on the frequencies, inv_freq * exp(alpha) in f32, shared by the
  // attention and the indexer as transformers' one rotary embedding is.
  if (!weights_.rope_alpha.empty()) {
    for (ops::Rope* rope : {&rope_, &index_rope_}) {
      LATENT_CHECK(rope->inv_freq.size() == weights_.rope_alpha.size());
      for (size_t i = 0; i < rope->inv_freq.size(); ++i) rope->inv_freq[i] *= std::exp(weights_.rope_alpha[i]);
    }
  }
  const cache::ModelCacheRows rows = CacheRows(config_, CacheDType::kF32);
  auto find = [&](int64_t l, const char* name) {
    for (size_t r = 0; r < rows[l].size(); ++r)
      if (rows[l][r].name == name) return static_cast<int>(r);
    return -1;
  };
  for (int64_t l = 0; l < static_cast<int64_t>(rows.size()); ++l) {
    has_indexer_ = has_indexer_ || config_.HasIndexer(l);
    latent_rows_.push_back(find(l, "mla.latent"));
    // GLM-5-Next's KPool indexer caches a packed row (key and gate score) instead.
    const int index = find(l, "dsa.index_k");
    index_rows_.push_back(index >= 0 ? index : find(l, "dsa.kpool"));
  }
}

void DeepseekModel::DisableRotation() {
  for (ops::Rope* rope : {&rope_, &index_rope_}) {
    std::fill(rope->inv_freq.begin(), rope->inv_freq.end(), 0.0f);
    rope->long_inv_freq.clear();
    rope->attention_factor = 1.0f;
    rope->softmax_scale = 1.0f / std::sqrt(static_cast<float>(config_.qk_head_dim()));
  }
}

MlaDims DeepseekModel::LayerDims(int64_t l) const {
  MlaDims d = dims_;
  d.rope = config_.RopeDims(l);
  d.nope = config_.qk_head_dim() - d.rope;
  return d;
}

uint64_t DeepseekModel::PrefixCacheSalt(int64_t prompt_len) const {
  const bool long_rope = !rope_.long_inv_freq.empty() && prompt_len > rope_.long_after;
  return long_rope ? 0x6c6f6e67726f7065ull : 0;  // "longrope"
}

void DeepseekModel::Reserve(int64_t max_tokens) {
  const ModelConfig& c = config_;
  Start(max_tokens);
  workspace_.head.Get(max_tokens * c.hidden_size);
  // The widest MLP any layer runs: dense, the routed experts', the shared experts' (LongCat's
  // shortcut MoE and dense MLPs share a layer, one after the other).
  const int64_t shared = c.n_shared_experts *
      (c.shared_expert_intermediate_size > 0 ? c.shared_expert_intermediate_size : c.moe_intermediate_size);
  const int64_t inter = std::max({c.intermediate_size, c.moe_intermediate_size, shared});
  bool moe = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) moe = moe || c.IsMoeLayer(l);
  workspace_.ffn.Reserve(max_tokens, inter, moe ? &moe_dims_ : nullptr);
  workspace_.attention.Reserve(threads::NumThreads());
}

DeepseekModel::Activations DeepseekModel::Start(int64_t tokens) const {
  const int64_t n = tokens * config_.hidden_size;
  Activations a;
  a.tokens = tokens;
  a.hidden = workspace_.hidden.Get(n);
  a.normed = workspace_.normed.Get(n);
  a.branch = workspace_.branch.Get(n);
  a.extra = workspace_.extra.Get(n * std::max<int64_t>(config_.hc_mult, 1));
  return a;
}

DeepseekModel::Activations DeepseekModel::Start(const ForwardBatch& batch) const {
  batch.Validate();
  // Denormals flushed from the step's first op: ParallelFor sets FTZ/DAZ on its caller, but a
  // kernel small enough to skip it would otherwise run under whatever this thread had before
  // (a fresh engine or Python thread: not flushed), and the same step could round differently
  // on its first run than on later ones.
  threads::FlushDenormals();
  return Start(static_cast<int64_t>(batch.token_ids.size()));
}

void DeepseekModel::EnableKda(KdaForgetGateKind gate) {
  kda_gate_ = gate;
  kda_dims_.heads = config_.linear_num_heads;
  kda_dims_.head_dim = config_.linear_head_dim;
  kda_dims_.conv_kernel = config_.linear_conv_kernel;
  if (config_.linear_gate_lower_bound) {
    kda_dims_.gate_lower_bound = static_cast<float>(*config_.linear_gate_lower_bound);
  }
}

void DeepseekModel::Embed(const ForwardBatch& batch, float* hidden) const {
  const auto& k = kernels::BestKernels();
  const int64_t d = config_.hidden_size;
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  LATENT_PROFILE_SCOPE(kEmbed);
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t id = batch.token_ids[t];
    if (id < 0 || id >= config_.vocab_size) {
      Fail("token id ", id, " is outside the vocabulary (size ", config_.vocab_size, ")");
    }
  }
  threads::ParallelRows(tokens, d, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      k.dequant_row(weights_.embed, batch.token_ids[t], &hidden[t * d]);
    }
  });
  dump::Tensor("embed", -1, hidden, tokens, d);
}

void DeepseekModel::RmsNorm(const float* x, int64_t tokens, const NormWeight& w, float* out) const {
  LATENT_PROFILE_SCOPE(kNorm);
  ops::RmsNorm(x, tokens, config_.hidden_size, w, static_cast<float>(config_.rms_norm_eps), out);
}

void DeepseekModel::MlaAttention(int64_t l, const ForwardBatch& batch, const float* x,
                                 AttentionForm form, DsaSelection* selection, float* out,
                                 const float* query_scale) const {
  const LayerWeights& w = weights_.layers[l];
  const MlaDims dims = LayerDims(l);
  dump::Tensor("attn_in", l, x, static_cast<int64_t>(batch.token_ids.size()), config_.hidden_size);
  DsaLayer dsa;
  if (selection != nullptr) {
    dsa.indexer = w.indexer ? &*w.indexer : nullptr;
    dsa.rope = dims.rope > 0 ? &index_rope_ : nullptr;
    dsa.dims = DsaDimsOf(config_);
    dsa.selection = selection;
    if (dsa.indexer != nullptr) {
      LATENT_CHECK(index_rows_[l] >= 0);
      dsa.index_row = index_rows_[l];
    }
  }
  // KV sharing: the rows of the layer that owns them.
  const int64_t source = config_.KvSourceLayer(l);
  LATENT_CHECK(latent_rows_[source] >= 0);
  MlaLayerOptions options;
  options.latent_layer = source;
  std::vector<float> head_scale;  // [T, H]
  if (!w.attention.query_scale.empty()) {
    head_scale = w.attention.query_scale.Factors(batch.positions);
    options.head_query_scale = head_scale.data();
  }
  ops::MlaAttentionForward(dims, w.attention, rope_, l, batch, x, config_.hidden_size, form,
                           selection != nullptr ? &dsa : nullptr, out, query_scale,
                           latent_rows_[source], &options, &workspace_.attention);
  dump::Tensor("attn_out", l, out, static_cast<int64_t>(batch.token_ids.size()), config_.hidden_size);
}

void DeepseekModel::Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
                            ForwardTrace* trace) const {
  LATENT_PROFILE_SCOPE(kStep);
  Activations a = Start(batch);
  Embed(batch, a.hidden);
  // [T] the positions each token attends to: from the layer's own indexer, or on a shared layer
  // the last full layer's.
  DsaSelection selection;
  DsaSelection* dsa = has_indexer_ ? &selection : nullptr;
  if (trace != nullptr && dsa != nullptr) trace->selected.assign(config_.num_hidden_layers, {});
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) ResidualLayer(l, batch, form, a, dsa, trace);
  Head(batch, a.hidden, logits);
}

void DeepseekModel::ResidualLayer(int64_t l, const ForwardBatch& batch, AttentionForm form,
                                  const Activations& a, DsaSelection* dsa, ForwardTrace* trace,
                                  const float* query_scale) const {
  const LayerWeights& w = weights_.layers[l];
  RmsNorm(a.hidden, a.tokens, w.input_norm, a.normed);
  Attention(l, batch, a.normed, form, dsa, a.branch, trace, query_scale);
  AddResidual(a.hidden, a.branch, a.tokens);
  RmsNorm(a.hidden, a.tokens, w.post_attention_norm, a.normed);
  FeedForward(l, a.normed, a.tokens, a.branch, trace);
  AddResidual(a.hidden, a.branch, a.tokens);
  dump::Tensor("hidden", l, a.hidden, a.tokens, config_.hidden_size);
}

void DeepseekModel::Attention(int64_t l, const ForwardBatch& batch, const float* x,
                              AttentionForm form, DsaSelection* dsa, float* out,
                              ForwardTrace* trace, const float* query_scale) const {
  if (config_.IsLinearAttentionLayer(l)) {
    KdaAttentionForward(kda_dims_, *weights_.layers[l].kda, kda_gate_,
                        static_cast<float>(config_.rms_norm_eps), l, batch, x, config_.hidden_size,
                        out);
    return;
  }
  MlaAttention(l, batch, x, form, dsa, out, query_scale);
  if (trace != nullptr && dsa != nullptr) trace->selected[l] = *dsa;
}

void DeepseekModel::FeedForward(int64_t l, const float* x, int64_t tokens, float* out,
                                ForwardTrace* trace) const {
  const LayerWeights& w = weights_.layers[l];
  dump::Tensor("ffn_in", l, x, tokens, config_.hidden_size);
  if (w.moe) {
    std::vector<int32_t>* chosen = nullptr;
    if (trace != nullptr) {
      trace->experts.resize(config_.num_hidden_layers);
      chosen = &trace->experts[l];
    }
    ops::MoeForward(moe_dims_, *w.moe, x, tokens, out, chosen, sum_partials_, &workspace_.ffn);
    dump::Tensor("moe_out", l, out, tokens, config_.hidden_size);
  } else {
    LATENT_PROFILE_SCOPE(kDenseMlp);
    ops::MlpForward(*w.dense, x, tokens, out,
                    config_.swiglu_limit_all_mlps ? static_cast<float>(config_.swiglu_limit) : 0.0f,
                    &workspace_.ffn);
    dump::Tensor("mlp_out", l, out, tokens, config_.hidden_size);
  }
}

void DeepseekModel::MlaAttentionAt(int64_t slot, int64_t cache_layer, int cache_row,
                                   const ForwardBatch& batch, const float* x, AttentionForm form,
                                   float* out) const {
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  dump::Tensor("attn_in", slot, x, tokens, config_.hidden_size);
  ops::MlaAttentionForward(dims_, weights_.layers[slot].attention, rope_, cache_layer, batch, x,
                           config_.hidden_size, form, /*dsa=*/nullptr, out, /*query_scale=*/nullptr,
                           cache_row, /*options=*/nullptr, &workspace_.attention);
  dump::Tensor("attn_out", slot, out, tokens, config_.hidden_size);
}

void DeepseekModel::DenseMlp(int64_t slot, const float* x, int64_t tokens, float* out) const {
  LATENT_PROFILE_SCOPE(kDenseMlp);
  ops::MlpForward(*weights_.layers[slot].dense, x, tokens, out, 0.0f, &workspace_.ffn);
  dump::Tensor("mlp_out", slot, out, tokens, config_.hidden_size);
}

void DeepseekModel::Moe(int64_t slot, int64_t layer, const float* x, int64_t tokens, float* out,
                        ForwardTrace* trace) const {
  std::vector<int32_t>* chosen = nullptr;
  if (trace != nullptr) {
    trace->experts.resize(config_.num_hidden_layers);
    chosen = &trace->experts[layer];
  }
  ops::MoeForward(moe_dims_, *weights_.layers[slot].moe, x, tokens, out, chosen, sum_partials_,
                  &workspace_.ffn);
  dump::Tensor("moe_out", layer, out, tokens, config_.hidden_size);
}

void DeepseekModel::AddResidual(float* hidden, const float* branch, int64_t tokens) const {
  LATENT_PROFILE_SCOPE(kResidual);
  const int64_t d = config_.hidden_size;
  threads::ParallelRows(tokens, d, [&](int64_t t0, int64_t t1) {
    for (int64_t i = t0 * d; i < t1 * d; ++i) hidden[i] += branch[i];
  });
}

void DeepseekModel::Head(const ForwardBatch& batch, const float* hidden, float* logits,
                         float hidden_divisor) const {
  const int64_t d = config_.hidden_size;
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  const int64_t rows = static_cast<int64_t>(batch.logits_rows.size());
  float* last = workspace_.head.Get(rows * d);  // [R, D]
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = batch.logits_rows[r];
    LATENT_CHECK(t >= 0 && t < tokens);
    std::copy(&hidden[t * d], &hidden[(t + 1) * d], &last[r * d]);
  }
  {
    LATENT_PROFILE_SCOPE(kNorm);
    kernels::BestKernels().rms_norm(last, rows, d, weights_.final_norm.data,
                                    weights_.final_norm.dtype,
                                    static_cast<float>(config_.rms_norm_eps), last);
  }
  if (hidden_divisor != 1.0f) {  // MiniCPM3 scales the final hidden state down before lm_head.
    for (int64_t i = 0; i < rows * d; ++i) last[i] /= hidden_divisor;
  }
  LATENT_PROFILE_SCOPE(kLmHead);
  kernels::Linear(last, rows, weights_.lm_head, logits);
  if (config_.final_logit_softcapping > 0) {
    const float cap = static_cast<float>(config_.final_logit_softcapping);
    for (int64_t i = 0; i < rows * config_.vocab_size; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
}

}  // namespace latent::model
