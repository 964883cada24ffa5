#include "ops/position_scale.h"

#include <cmath>

namespace latent::ops {

std::vector<float> LogPositionScale::Factors(std::span<const int64_t> positions) const {
  const int64_t h = heads();
  std::vector<float> out(positions.size() * h);
  for (size_t t = 0; t < positions.size(); ++t) {
    const float log_pos = std::log(static_cast<float>(positions[t] + 1));
    for (int64_t i = 0; i < h; ++i) {
      const float product = scale[i] * log_pos;  // rounded before the sum, as torch does
      out[t * h + i] = product + bias[i];
    }
  }
  return out;
}

void ScaleHeads(float* q, int64_t tokens, int64_t heads, int64_t dim, const float* factors) {
  for (int64_t r = 0; r < tokens * heads; ++r) {
    float* row = q + r * dim;
    for (int64_t i = 0; i < dim; ++i) row[i] *= factors[r];
  }
}

}  // namespace latent::ops
