// Activation rows rounded to bf16 for the kernels over tile-packed weights (avx512/
// linear_bf16_packed.cc, linear_fp8_packed.cc, amx/linear_amx.cc). Include only inside a target
// region with AVX512_BF16 (after avx512_common.h), and threads/thread_pool.h before the region.
#pragma once

#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace latent::kernels::avx512 {
// Internal linkage: the files that include this are compiled for different AVX-512 extensions
// (the fp8 kernel adds VBMI), and a shared inline copy kept by the linker could carry one file's
// instructions into the other's.
namespace {

// x [m, k] f32 -> out [m, kp] bf16, round to nearest even (NaN stays NaN), zero past k.
inline void RoundRowsPadded(const float* x, int64_t m, int64_t k, int64_t kp, uint16_t* out) {
  for (int64_t r = 0; r < m; ++r) {
    const float* src = x + r * k;
    uint16_t* dst = out + r * kp;
    int64_t c = 0;
    for (; c + 32 <= k; c += 32) {
      const __m512bh v =
          _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + c + 16), _mm512_loadu_ps(src + c));
      _mm512_storeu_si512(dst + c, (__m512i)v);
    }
    for (; c < kp; c += 16) {
      const int64_t left = std::max<int64_t>(0, std::min<int64_t>(16, k - c));
      const __m512 v = _mm512_maskz_loadu_ps(TailMask(left), src + c);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), (__m256i)_mm512_cvtneps_pbh(v));
    }
  }
}

// x [m, k] rounded as above into this thread's buffer [m, kp] (kp: k rounded up to whole tiles of
// 32), which stays valid until the thread's next call: the packed kernels' activations.
inline const uint16_t* RoundedRows(const float* x, int64_t m, int64_t k, int64_t kp) {
  thread_local std::vector<uint16_t> rows;
  if (static_cast<int64_t>(rows.size()) < m * kp) rows.resize(m * kp);
  uint16_t* out = rows.data();
  threads::ParallelRows(m, kp, [&](int64_t r0, int64_t r1) {
    RoundRowsPadded(x + r0 * k, r1 - r0, k, kp, out + r0 * kp);
  });
  return out;
}

}  // namespace
}  // namespace latent::kernels::avx512
