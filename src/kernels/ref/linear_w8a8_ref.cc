#include "kernels/ref/linear_w8a8_ref.h"

#include <cstring>
#include <vector>

#include "base/error.h"
#include "kernels/quantize_row.h"

namespace latent::kernels {

bool IsW8A8(const WeightRef& w) {
  return w.dtype == DType::kI8 && w.row_sums != nullptr && w.scale != nullptr &&
         w.scale_dtype == DType::kF32 && w.block_n == 1 && w.block_k == w.k;
}

void LinearW8A8Ref(const float* x, int64_t m, const WeightRef& w, float* y) {
  LATENT_CHECK(IsW8A8(w));
  const int64_t n = w.n, k = w.k;
  std::vector<int8_t> xq(static_cast<size_t>(m * k));  // [m, k]
  std::vector<float> sx(static_cast<size_t>(m));        // [m]
  for (int64_t i = 0; i < m; ++i) sx[i] = QuantizeRowInt8(x + i * k, k, xq.data() + i * k);
  const int8_t* q = static_cast<const int8_t*>(w.data);  // [n, k]
  for (int64_t r = 0; r < n; ++r) {
    float sw;
    std::memcpy(&sw, static_cast<const uint8_t*>(w.scale) + 4 * (w.scale_row0 + r), 4);
    const int8_t* row = q + r * k;
    for (int64_t i = 0; i < m; ++i) {
      const int8_t* xi = xq.data() + i * k;
      int32_t dot = 0;  // |dot| <= 127 * 127 * k: exact in int32 for k < 133000
      for (int64_t c = 0; c < k; ++c) dot += static_cast<int32_t>(xi[c]) * row[c];
      y[i * n + r] = static_cast<float>(dot) * (sx[i] * sw);
    }
  }
}

}  // namespace latent::kernels
