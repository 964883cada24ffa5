#include <algorithm>

#include "kernels/index_scores.h"

namespace latent::kernels {
namespace {

inline float At(const float* row, int64_t i) { return row[i]; }
inline float At(const uint16_t* row, int64_t i) { return BF16ToF32(row[i]); }

template <typename T>
void IndexScoresOf(const IndexScoreArgs& a) {
  for (int64_t j = 0; j < a.n; ++j) {
    const T* key = static_cast<const T*>(a.keys[j]);
    float score = 0.0f;
    for (int64_t h = 0; h < a.heads; ++h) {
      const float* q = a.q + h * a.dim;
      float dot = 0.0f;
      for (int64_t c = 0; c < a.dim; ++c) dot += q[c] * At(key, c);
      score += a.w[h] * std::max(dot * a.scale, 0.0f);
    }
    a.scores[j] = score;
  }
}

}  // namespace

void IndexScoresRef(const IndexScoreArgs& a) {
  if (a.rows == DType::kBF16) {
    IndexScoresOf<uint16_t>(a);
  } else {
    IndexScoresOf<float>(a);
  }
}

}  // namespace latent::kernels
