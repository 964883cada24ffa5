#include "ops/kpool.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"

namespace latent::ops {

void KPoolKeys(const KPoolDims& d, const float* packed, int64_t pools, const float* ape,
               float* pool_keys) {
  const int64_t di = d.head_dim, width = d.packed();
  std::vector<float> logits(d.pool);
  for (int64_t p = 0; p < pools; ++p) {
    const float* rows = packed + p * d.pool * width;  // [pool, 2 d_i]
    for (int64_t c = 0; c < di; ++c) {
      float top = -INFINITY;
      for (int64_t i = 0; i < d.pool; ++i) {
        logits[i] = rows[i * width + di + c] + ape[i * di + c];
        top = std::max(top, logits[i]);
      }
      float sum = 0.0f;
      for (int64_t i = 0; i < d.pool; ++i) sum += logits[i] = std::exp(logits[i] - top);
      float key = 0.0f;
      for (int64_t i = 0; i < d.pool; ++i) key += logits[i] / sum * rows[i * width + c];
      pool_keys[p * di + c] = key;
    }
  }
}

void KPoolSelect(const KPoolDims& d, const std::vector<float>& scores, int64_t position,
                 std::vector<int32_t>& order, std::vector<int32_t>& chosen) {
  const int64_t eligible = (position + 1) / d.pool;
  LATENT_CHECK(static_cast<int64_t>(scores.size()) == eligible);
  chosen.clear();
  if (eligible <= d.topk_pools) return;  // every pool and the tail: dense
  order.resize(eligible);
  std::iota(order.begin(), order.end(), 0);
  // nth_element under a strict total order picks exactly the set a full sort would.
  std::nth_element(order.begin(), order.begin() + d.topk_pools, order.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  std::sort(order.begin(), order.begin() + d.topk_pools);
  chosen.reserve(d.topk_pools * d.pool + d.pool);
  for (int64_t i = 0; i < d.topk_pools; ++i)
    for (int64_t j = 0; j < d.pool; ++j) chosen.push_back(static_cast<int32_t>(order[i] * d.pool + j));
  for (int64_t p = eligible * d.pool; p <= position; ++p) chosen.push_back(static_cast<int32_t>(p));
}

}  // namespace latent::ops
