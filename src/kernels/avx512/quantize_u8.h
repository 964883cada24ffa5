// One activation row quantized for vpdpbusd and TDPBUSD (u8 = xq + 128), shared by the W8A8
// VNNI kernels over the rows as stored (linear_w8a8_vnni.cc) and over their packed copy
// (linear_w8a8_vnni_packed.cc), and by AMX's (amx/linear_w8a8_amx.cc) through
// w8a8_packed_call.h. Include only inside a target region with AVX-512F, after avx512_common.h.
#pragma once

#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

namespace latent::kernels::avx512 {
// Internal linkage, as in bf16_rows.h: the files that include this may differ in their targets.
namespace {

// One activation row to u8 = xq + 128 (padded with 128 to kp); returns its scale. The same f32
// operations as QuantizeRowInt8: max of |x| (vmaxps returns its second operand, the running max,
// when x is NaN, as std::max does), scale = max / 127 (a quiet NaN when the row holds a NaN, with
// every value 128), x / scale (vdivps, IEEE), rounded to nearest even, clamped to [-127, 127].
float QuantizeRowU8(const float* x, int64_t k, int64_t kp, uint8_t* out) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 amax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    const __m512 v = _mm512_loadu_ps(x + c);
    amax = _mm512_max_ps(_mm512_and_ps(v, abs_mask), amax);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  if (c < k) {
    const __m512 v = _mm512_maskz_loadu_ps(TailMask(k - c), x + c);
    amax = _mm512_max_ps(_mm512_and_ps(v, abs_mask), amax);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  const float scale = nan != 0 ? std::numeric_limits<float>::quiet_NaN() : ReduceMax(amax) / 127.0f;
  if (!(scale > 0.0f)) {  // all zeros, or a NaN: the outputs 0, or NaN through the scale
    std::memset(out, 128, static_cast<size_t>(kp));
    return nan != 0 ? scale : 0.0f;
  }
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const __m512i bias = _mm512_set1_epi32(128);
  for (c = 0; c < k; c += 16) {
    const __mmask16 mask = TailMask(std::min<int64_t>(16, k - c));
    __m512 r = _mm512_roundscale_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(mask, x + c), s),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r);
    r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
    const __m512i u = _mm512_add_epi32(_mm512_cvtps_epi32(r), bias);  // 1 .. 255
    _mm512_mask_cvtepi32_storeu_epi8(out + c, mask, u);
  }
  if (kp > k) std::memset(out + k, 128, static_cast<size_t>(kp - k));
  return scale;
}

}  // namespace
}  // namespace latent::kernels::avx512
