// The parts of the one-query attention (kernels/attention.h) that the f32 kernel
// (attention_avx512.cc) and the bf16 one (attention_bf16.cc) share: the segments of positions,
// the fixed lane-reduction tree of 8 heads and the merge of the segments (under the AVX-512
// target pragma of avx512_common.h, as its own functions).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/avx512/avx512_common.h"

LATENT_AVX512_BEGIN
namespace latent::kernels::avx512 {
// Internal linkage: the AVX-512, AVX512-BF16 and AMX files each compile their own copy.
namespace {

// Rows per segment: a function of L only, so the arithmetic never depends on the thread count.
inline int64_t SegmentRows(int64_t length) {
  if (length <= 512) return std::max<int64_t>(length, 1);
  return std::max<int64_t>(512, ((length + 7) / 8 + 63) / 64 * 64);
}

// The 8 lane sums of a[0..7] as lanes 0..7, in one fixed tree (pairs of lanes, then 128-bit
// blocks); head g's sum never depends on the other vectors.
inline __m256 Reduce8(const __m512* a) {
  const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
  const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
  const __m512 t2 = _mm512_add_ps(_mm512_unpacklo_ps(a[4], a[5]), _mm512_unpackhi_ps(a[4], a[5]));
  const __m512 t3 = _mm512_add_ps(_mm512_unpacklo_ps(a[6], a[7]), _mm512_unpackhi_ps(a[6], a[7]));
  // Per 128-bit block: [a0, a1, a2, a3] and [a4, a5, a6, a7] (partial sums of that block).
  const __m512 u0 = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 u1 = _mm512_add_ps(_mm512_shuffle_ps(t2, t3, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(t2, t3, _MM_SHUFFLE(3, 2, 3, 2)));
  // Blocks: [u0 b0+b2, u0 b1+b3, u1 b0+b2, u1 b1+b3], then adjacent blocks added.
  const __m512 v = _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 w = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps256(_mm512_shuffle_f32x4(w, w, _MM_SHUFFLE(2, 0, 2, 0)));
}

// a.out [H, dv] from the per-segment states at `base` (each per_segment = H * (dv + 2) floats:
// max [H], sum [H], unnormalised acc [H, dv]), merged in segment order.
inline void MergeSegments(const AttentionArgs& a, const float* base, int64_t segments,
                          int64_t per_segment) {
  const int64_t h = a.num_heads, dv = a.v_dim;
  for (int64_t i = 0; i < h; ++i) {
    float global_max = -INFINITY;
    for (int64_t s = 0; s < segments; ++s)
      global_max = std::max(global_max, base[s * per_segment + i]);
    float* out = a.out + i * dv;
    std::fill(out, out + dv, 0.0f);
    float total = 0.0f;
    for (int64_t s = 0; s < segments; ++s) {
      const float* seg = base + s * per_segment;
      const float f = ExpScalar(seg[i] - global_max);
      total += f * seg[h + i];
      const __m512 fv = _mm512_set1_ps(f);
      const float* acc = seg + 2 * h + i * dv;
      for (int64_t c = 0; c < dv; c += 16) {
        const __mmask16 m = TailMask(std::min<int64_t>(16, dv - c));
        const __m512 v = _mm512_fmadd_ps(fv, _mm512_maskz_loadu_ps(m, acc + c),
                                         _mm512_maskz_loadu_ps(m, out + c));
        _mm512_mask_storeu_ps(out + c, m, v);
      }
    }
    DivideRow(out, dv, SinkDenominator(a.sinks, i, global_max, total));
  }
}

}  // namespace
}  // namespace latent::kernels::avx512
LATENT_AVX512_END
