// Activation rows for the AVX2 kernels over tile-packed weights (avx2/linear_bf16_packed_avx2.cc,
// linear_fp8_packed_avx2.cc): rounded to bf16 and kept as f32. Plain C++ (the rounding itself is
// RoundActivationsToBf16's AVX2 code): include it outside the target region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/avx2/avx2_kernels.h"
#include "threads/thread_pool.h"

namespace latent::kernels::avx2 {

// x [m, k] rounded to bf16 (kept as f32) into this thread's buffer [m, kp], zero past k: the
// packed weights are zero there too, and 0 * 0 keeps the sums as they are. Valid until the
// thread's next call.
inline const float* RoundedRowsF32(const float* x, int64_t m, int64_t k, int64_t kp) {
  thread_local std::vector<float> rows;
  if (static_cast<int64_t>(rows.size()) < m * kp) rows.resize(m * kp);
  float* out = rows.data();
  threads::ParallelRows(m, kp, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RoundActivationsToBf16(x + r * k, k, out + r * kp);
      std::fill(out + r * kp + k, out + (r + 1) * kp, 0.0f);
    }
  });
  return out;
}

}  // namespace latent::kernels::avx2
