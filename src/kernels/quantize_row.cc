#include "kernels/quantize_row.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace latent::kernels {

float QuantizeRowInt8(const float* w, int64_t k, int8_t* q) {
  float amax = 0.0f;
  bool has_nan = false;
  for (int64_t c = 0; c < k; ++c) {
    amax = std::max(amax, std::fabs(w[c]));
    has_nan |= w[c] != w[c];
  }
  const float scale = has_nan ? std::numeric_limits<float>::quiet_NaN() : amax / 127.0f;
  if (!(scale > 0.0f)) {  // all zeros (the row contributes nothing) or a NaN (its outputs NaN)
    std::fill(q, q + k, int8_t{0});
    return has_nan ? scale : 0.0f;
  }
  for (int64_t c = 0; c < k; ++c) {
    // nearbyint rounds to nearest even in the default rounding mode, as torch.round does.
    const float v = std::nearbyint(w[c] / scale);
    q[c] = v == v ? static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f)) : int8_t{0};  // NaN: 0
  }
  return scale;
}

int32_t SumRowInt8(const int8_t* q, int64_t k) {
  int32_t sum = 0;
  for (int64_t c = 0; c < k; ++c) sum += q[c];
  return sum;
}

}  // namespace latent::kernels
