#include "kernels/index_scores.h"

namespace latent::kernels {
namespace {

// Element c of a key as f32 (kernels/row_format.h): f32 and bf16 exactly, fp8 as code * scale.
template <class Read>
void IndexScoresOf(const IndexScoreArgs& a, Read at) {
  for (int64_t j = 0; j < a.n; ++j) {
    const void* key = a.keys[j];
    float score = 0.0f;
    for (int64_t h = 0; h < a.heads; ++h) {
      const float* q = a.q + h * a.dim;
      float dot = 0.0f;
      for (int64_t c = 0; c < a.dim; ++c) dot += q[c] * at(key, c);
      // relu with NaN as 0, as the vector kernels' max(x, 0) gives: a NaN key scores like one
      // with no positive head, and the top-k's order stays total.
      const float scaled = dot * a.scale;
      score += a.w[h] * (scaled > 0.0f ? scaled : 0.0f);
    }
    a.scores[j] = score;
  }
}

}  // namespace

void IndexScoresRef(const IndexScoreArgs& a) {
  switch (a.rows.dtype) {
    case DType::kBF16:
      IndexScoresOf(a, [](const void* key, int64_t c) {
        return BF16ToF32(static_cast<const uint16_t*>(key)[c]);
      });
      break;
    case DType::kF8E4M3:
      IndexScoresOf(a, [&](const void* key, int64_t c) { return RowValue(a.rows, key, c); });
      break;
    default:
      IndexScoresOf(a, [](const void* key, int64_t c) {
        return static_cast<const float*>(key)[c];
      });
  }
}

}  // namespace latent::kernels
