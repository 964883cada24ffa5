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

DeepseekModel::Activations DeepseekModel::Start(const ForwardBatch& batch) const {
  batch.Validate();
  Activations a;
  a.tokens = static_cast<int64_t>(batch.token_ids.size());
  const int64_t n = a.tokens * config_.hidden_size;
  a.hidden.resize(n);
  a.normed.resize(n);
  a.branch.resize(n);
  return a;
}

void DeepseekModel::Embed(const ForwardBatch& batch, float* hidden) const {
  const auto& k = kernels::BestKernels();
  const int64_t d = config_.hidden_size;
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  for (int64_t t = 0; t < tokens; ++t) {
    LATENT_PROFILE_SCOPE(kEmbed);
    const int32_t id = batch.token_ids[t];
    if (id < 0 || id >= config_.vocab_size) {
      Fail("token id ", id, " is outside the vocabulary (size ", config_.vocab_size, ")");
    }
    k.dequant_row(weights_.embed, id, &hidden[t * d]);
  }
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
    dsa.dims = {config_.index_n_heads, config_.index_head_dim, config_.index_topk,
                config_.index_rope_last, static_cast<float>(config_.index_k_norm_eps)};
    dsa.dims.kpool = config_.index_kpool;
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
  MlaAttentionForward(dims, w.attention, rope_, l, batch, x, config_.hidden_size, form,
                      selection != nullptr ? &dsa : nullptr, out, query_scale, latent_rows_[source],
                      &options);
  dump::Tensor("attn_out", l, out, static_cast<int64_t>(batch.token_ids.size()), config_.hidden_size);
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
    ops::MoeForward(moe_dims_, *w.moe, x, tokens, out, chosen, sum_partials_);
    dump::Tensor("moe_out", l, out, tokens, config_.hidden_size);
  } else {
    LATENT_PROFILE_SCOPE(kDenseMlp);
    ops::MlpForward(*w.dense, x, tokens, out,
                    config_.swiglu_limit_all_mlps ? static_cast<float>(config_.swiglu_limit) : 0.0f);
    dump::Tensor("mlp_out", l, out, tokens, config_.hidden_size);
  }
}

void DeepseekModel::MlaAttentionAt(int64_t slot, int64_t cache_layer, int cache_row,
                                   const ForwardBatch& batch, const float* x, AttentionForm form,
                                   float* out) const {
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  dump::Tensor("attn_in", slot, x, tokens, config_.hidden_size);
  MlaAttentionForward(dims_, weights_.layers[slot].attention, rope_, cache_layer, batch, x,
                      config_.hidden_size, form, /*dsa=*/nullptr, out, /*query_scale=*/nullptr,
                      cache_row);
  dump::Tensor("attn_out", slot, out, tokens, config_.hidden_size);
}

void DeepseekModel::DenseMlp(int64_t slot, const float* x, int64_t tokens, float* out) const {
  LATENT_PROFILE_SCOPE(kDenseMlp);
  ops::MlpForward(*weights_.layers[slot].dense, x, tokens, out);
  dump::Tensor("mlp_out", slot, out, tokens, config_.hidden_size);
}

void DeepseekModel::Moe(int64_t slot, int64_t layer, const float* x, int64_t tokens, float* out,
                        ForwardTrace* trace) const {
  std::vector<int32_t>* chosen = nullptr;
  if (trace != nullptr) {
    trace->experts.resize(config_.num_hidden_layers);
    chosen = &trace->experts[layer];
  }
  ops::MoeForward(moe_dims_, *weights_.layers[slot].moe, x, tokens, out, chosen, sum_partials_);
  dump::Tensor("moe_out", layer, out, tokens, config_.hidden_size);
}

void DeepseekModel::AddResidual(float* hidden, const float* branch, int64_t tokens) const {
  LATENT_PROFILE_SCOPE(kResidual);
  for (int64_t i = 0; i < tokens * config_.hidden_size; ++i) hidden[i] += branch[i];
}

void DeepseekModel::Head(const ForwardBatch& batch, const float* hidden, float* logits,
                         float hidden_divisor) const {
  const int64_t d = config_.hidden_size;
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  const int64_t rows = static_cast<int64_t>(batch.logits_rows.size());
  std::vector<float> last(rows * d);  // [R, D]
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = batch.logits_rows[r];
    LATENT_CHECK(t >= 0 && t < tokens);
    std::copy(&hidden[t * d], &hidden[(t + 1) * d], &last[r * d]);
  }
  {
    LATENT_PROFILE_SCOPE(kNorm);
    kernels::BestKernels().rms_norm(last.data(), rows, d, weights_.final_norm.data,
                                    weights_.final_norm.dtype,
                                    static_cast<float>(config_.rms_norm_eps), last.data());
  }
  if (hidden_divisor != 1.0f) {  // MiniCPM3 scales the final hidden state down before lm_head.
    for (float& v : last) v /= hidden_divisor;
  }
  LATENT_PROFILE_SCOPE(kLmHead);
  kernels::Linear(last.data(), rows, weights_.lm_head, logits);
  if (config_.final_logit_softcapping > 0) {
    const float cap = static_cast<float>(config_.final_logit_softcapping);
    for (int64_t i = 0; i < rows * config_.vocab_size; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
}

}  // namespace latent::model
