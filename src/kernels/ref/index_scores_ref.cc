#include <algorithm>

#include "kernels/index_scores.h"

namespace latent::kernels {

void IndexScoresRef(const IndexScoreArgs& a) {
  for (int64_t j = 0; j < a.n; ++j) {
    const float* key = a.keys + j * a.dim;
    float score = 0.0f;
    for (int64_t h = 0; h < a.heads; ++h) {
      const float* q = a.q + h * a.dim;
      float dot = 0.0f;
      for (int64_t c = 0; c < a.dim; ++c) dot += q[c] * key[c];
      score += a.w[h] * std::max(dot * a.scale, 0.0f);
    }
    a.scores[j] = score;
  }
}

}  // namespace latent::kernels
