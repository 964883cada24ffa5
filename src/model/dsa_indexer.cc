#include "model/dsa_indexer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "kernels/kernel_table.h"

namespace latent::model {
namespace {

constexpr float kIndexNormEps = 1e-6f;  // The indexer's k_norm LayerNorm.

void Linear(const float* x, int64_t m, const kernels::WeightRef& w, float* y) {
  std::vector<float> scratch(w.k);
  kernels::BestKernels().linear(x, m, w, y, scratch.data());
}

}  // namespace

void RunDsaIndexer(const DsaDims& d, const IndexerWeights& w, const ops::Rope& rope,
                   int64_t layer, const ForwardBatch& batch, const float* x, int64_t hidden,
                   const float* q_resid, int64_t q_lora, LatentCache& cache, DsaSelection& selection) {
  const auto& k = kernels::BestKernels();
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  selection.assign(tokens, {});

  // Keys [T, d_i]: LayerNorm(wk x), first dr dims rotated; cached.
  std::vector<float> keys(tokens * d.head_dim);
  Linear(x, tokens, w.wk, keys.data());
  k.layer_norm(keys.data(), tokens, d.head_dim, w.k_norm.data, w.k_norm_bias.data, w.k_norm.dtype,
               kIndexNormEps, keys.data());
  // Queries [T, n_h, d_i] from the query latent.
  std::vector<float> queries(tokens * d.heads * d.head_dim);
  Linear(q_resid, tokens, w.wq_b, queries.data());
  std::vector<float> cos(rope.dim / 2), sin(rope.dim / 2);
  for (int64_t t = 0; t < tokens; ++t) {
    rope.CosSin(batch.positions[t], cos.data(), sin.data());
    rope.Apply(&keys[t * d.head_dim], cos.data(), sin.data());
    for (int64_t h = 0; h < d.heads; ++h) rope.Apply(&queries[(t * d.heads + h) * d.head_dim], cos.data(), sin.data());
    cache.WriteRow(layer, kIndexRow, batch.seq_slots[t], batch.positions[t], &keys[t * d.head_dim]);
  }
  // Head weights [T, n_h] in f32.
  std::vector<float> head_weights(tokens * d.heads);
  Linear(x, tokens, kernels::WeightRef{w.weights_proj.data(), DType::kF32, d.heads, hidden}, head_weights.data());
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(d.heads));
  for (float& v : head_weights) v *= head_scale;
  const float score_scale = 1.0f / std::sqrt(static_cast<float>(d.head_dim));

  // Per sequence: score its cached keys for each of its tokens that needs selecting.
  std::map<int32_t, int64_t> context;  // slot -> largest position + 1
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t& c = context[batch.seq_slots[t]];
    c = std::max(c, batch.positions[t] + 1);
  }
  std::vector<float> cached, scores;
  std::vector<int32_t> order;
  for (const auto& [slot, length] : context) {
    if (length <= d.topk) continue;  // Every token of this sequence attends densely.
    cached.resize(length * d.head_dim);
    cache.GatherRows(layer, kIndexRow, slot, length, cached.data());
    for (int64_t t = 0; t < tokens; ++t) {
      if (batch.seq_slots[t] != slot) continue;
      const int64_t visible = batch.positions[t] + 1;
      if (visible <= d.topk) continue;
      scores.assign(visible, 0.0f);
      for (int64_t h = 0; h < d.heads; ++h) {
        const float* q = &queries[(t * d.heads + h) * d.head_dim];
        const float weight = head_weights[t * d.heads + h];
        for (int64_t j = 0; j < visible; ++j) {
          const float* key = &cached[j * d.head_dim];
          float dot = 0.0f;
          for (int64_t i = 0; i < d.head_dim; ++i) dot += q[i] * key[i];
          scores[j] += weight * std::max(dot * score_scale, 0.0f);
        }
      }
      order.resize(visible);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + d.topk, order.end(), [&](int32_t a, int32_t b) {
        return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
      });
      std::vector<int32_t>& chosen = selection[t];
      chosen.assign(order.begin(), order.begin() + d.topk);
      std::sort(chosen.begin(), chosen.end());
    }
  }
}

}  // namespace latent::model
