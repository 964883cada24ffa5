#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention.h"

namespace latent::kernels {
namespace {

// Element i of a row of `T` (float, or uint16_t holding bf16) as f32: exact.
inline float At(const float* row, int64_t i) { return row[i]; }
inline float At(const uint16_t* row, int64_t i) { return BF16ToF32(row[i]); }

template <typename T>
void AttentionOf(const AttentionArgs& a) {
  for (int64_t h = 0; h < a.num_heads; ++h) {
    const float* q = a.q + h * a.qk_dim;
    float max_score = -INFINITY;
    for (int64_t t = 0; t < a.length; ++t) {
      const T* k = static_cast<const T*>(a.keys[t]) + h * a.key_head_stride;
      float dot = 0.0f;
      for (int64_t i = 0; i < a.qk_dim; ++i) dot += q[i] * At(k, i);
      a.scratch[t] = dot * a.scale;
      max_score = std::max(max_score, a.scratch[t]);
    }
    float sum = 0.0f;
    for (int64_t t = 0; t < a.length; ++t) {
      a.scratch[t] = std::exp(a.scratch[t] - max_score);
      sum += a.scratch[t];
    }
    sum = SinkDenominator(a.sinks, h, max_score, sum);
    float* out = a.out + h * a.v_dim;
    std::fill(out, out + a.v_dim, 0.0f);
    for (int64_t t = 0; t < a.length; ++t) {
      const float p = a.scratch[t] / sum;
      const T* v = static_cast<const T*>(a.values[t]) + h * a.value_head_stride;
      for (int64_t i = 0; i < a.v_dim; ++i) out[i] += p * At(v, i);
    }
  }
}

}  // namespace

void AttentionRef(const AttentionArgs& a) {
  if (a.rows == DType::kBF16) {
    AttentionOf<uint16_t>(a);
  } else {
    AttentionOf<float>(a);
  }
}

void AttentionQueriesRef(const QueriesAttentionArgs& qa) {
  const AttentionArgs& shared = qa.shared;
  int64_t longest = 1;
  for (int64_t i = 0; i < qa.num_queries; ++i) longest = std::max(longest, qa.lengths[i]);
  std::vector<float> scores(longest);
  for (int64_t i = 0; i < qa.num_queries; ++i) {
    AttentionArgs a = shared;
    a.q = qa.q + i * shared.num_heads * shared.qk_dim;
    a.length = qa.lengths[i];
    a.out = qa.out + i * shared.num_heads * shared.v_dim;
    a.scratch = scores.data();
    AttentionRef(a);
  }
}

}  // namespace latent::kernels
