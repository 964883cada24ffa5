#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "kernels/attention.h"

namespace latent::kernels {
namespace {

// Element i of a row as f32: f32 and bf16 exactly, fp8 as code * scale (kernels/row_format.h).
struct ReadF32 {
  float operator()(const void* row, int64_t i) const { return static_cast<const float*>(row)[i]; }
};
struct ReadBF16 {
  float operator()(const void* row, int64_t i) const {
    return BF16ToF32(static_cast<const uint16_t*>(row)[i]);
  }
};
struct ReadFormat {  // any format (the fp8 encoding)
  const RowFormat& format;
  float operator()(const void* row, int64_t i) const { return RowValue(format, row, i); }
};

template <class Read>
void AttentionOf(const AttentionArgs& a, Read at) {
  for (int64_t h = 0; h < a.num_heads; ++h) {
    const float* q = a.q + h * a.qk_dim;
    const int64_t k0 = h * a.key_head_stride, v0 = h * a.value_head_stride;
    float max_score = -INFINITY;
    for (int64_t t = 0; t < a.length; ++t) {
      float dot = 0.0f;
      for (int64_t i = 0; i < a.qk_dim; ++i) dot += q[i] * at(a.keys[t], k0 + i);
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
      for (int64_t i = 0; i < a.v_dim; ++i) out[i] += p * at(a.values[t], v0 + i);
    }
  }
}

}  // namespace

void AttentionRef(const AttentionArgs& a) {
  switch (a.rows.dtype) {
    case DType::kBF16:
      AttentionOf(a, ReadBF16{});
      break;
    case DType::kF8E4M3:
      AttentionOf(a, ReadFormat{a.rows});
      break;
    default:
      AttentionOf(a, ReadF32{});
  }
}

void AttentionQueriesRef(const QueriesAttentionArgs& qa) {
  LATENT_CHECK(SharedKeysTaken(qa));
  const AttentionArgs& shared = qa.shared;
  int64_t positions = 0;  // the longest length
  for (int64_t i = 0; i < qa.num_queries; ++i) positions = std::max(positions, qa.lengths[i]);
  std::vector<float> scores(std::max<int64_t>(positions, 1));
  // With shared_keys: whole key rows [positions, H, qk] (f32), each head's values then the shared.
  std::vector<float> whole;
  std::vector<const void*> whole_keys;
  const void* const* keys = shared.keys;
  int64_t key_head_stride = shared.key_head_stride;
  if (qa.shared_key_dims > 0) {
    const int64_t h = shared.num_heads, dq = shared.qk_dim, own = dq - qa.shared_key_dims;
    whole.resize(positions * h * dq);
    whole_keys.resize(positions);
    for (int64_t t = 0; t < positions; ++t) {
      for (int64_t head = 0; head < h; ++head) {
        const float* key = static_cast<const float*>(shared.keys[t]) + head * key_head_stride;
        float* dst = &whole[(t * h + head) * dq];
        std::copy(key, key + own, dst);
        std::copy(qa.shared_keys[t], qa.shared_keys[t] + (dq - own), dst + own);
      }
      whole_keys[t] = &whole[t * h * dq];
    }
    keys = whole_keys.data();
    key_head_stride = dq;
  }
  for (int64_t i = 0; i < qa.num_queries; ++i) {
    AttentionArgs a = shared;
    const int64_t start = std::min(QueryStart(qa, i), qa.lengths[i]);
    a.key_head_stride = key_head_stride;
    a.keys = keys + start;
    a.values = shared.values + start;
    a.q = qa.q + i * shared.num_heads * shared.qk_dim;
    a.length = qa.lengths[i] - start;
    a.out = qa.out + i * shared.num_heads * shared.v_dim;
    a.scratch = scores.data();
    AttentionRef(a);
  }
}

}  // namespace latent::kernels
