// AVX-512 RMSNorm, LayerNorm, SiLU-mul and MLA's fused norm + rotary embedding. Each row is
// normalised on its own (the same code whatever m is); the per-element formulas are those of the
// reference, only the sums run in a different order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/argmax_lanes.h"
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/kernel_table.h"

LATENT_AVX512_BEGIN
namespace latent::kernels::avx512 {
namespace {

// Sum of f(x[c]) over a row, with 4 accumulators over 64-wide steps, then a fixed combine.
template <class F>
float RowSum(const float* x, int64_t d, F f) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t c = 0;
  for (; c + 64 <= d; c += 64) {
    a0 = f(_mm512_loadu_ps(x + c), a0);
    a1 = f(_mm512_loadu_ps(x + c + 16), a1);
    a2 = f(_mm512_loadu_ps(x + c + 32), a2);
    a3 = f(_mm512_loadu_ps(x + c + 48), a3);
  }
  for (; c < d; c += 16) {
    const __mmask16 m = TailMask(std::min<int64_t>(16, d - c));
    a0 = _mm512_mask_mov_ps(a0, m, f(_mm512_maskz_loadu_ps(m, x + c), a0));
  }
  return ReduceAdd(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void RmsNormRow(const float* x, int64_t d, const void* weight, DType weight_dtype, float eps,
                float* y) {
  const float sum_sq =
      RowSum(x, d, [](__m512 v, __m512 acc) { return _mm512_fmadd_ps(v, v, acc); });
  const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(sum_sq / static_cast<float>(d) + eps));
  for (int64_t c = 0; c < d; c += 16) {
    const __mmask16 mk = TailMask(std::min<int64_t>(16, d - c));
    const __m512 w = LoadVector(weight, weight_dtype, c, mk);
    const __m512 v = _mm512_mul_ps(w, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + c), inv));
    _mm512_mask_storeu_ps(y + c, mk, v);
  }
}

void RmsNorm(const float* x, int64_t m, int64_t d, const void* weight, DType weight_dtype,
             float eps, float* y) {
  for (int64_t i = 0; i < m; ++i) RmsNormRow(x + i * d, d, weight, weight_dtype, eps, y + i * d);
}

// A rounded product: kept out of GCC's reach, which would otherwise fuse it with the following
// add into an FMA (one rounding fewer than the reference's rotation).
inline __m512 Product(__m512 a, __m512 b) { return InRegister(_mm512_mul_ps(a, b)); }

// (x0, x1) <- (x0 cos - x1 sin, x1 cos + x0 sin), lane by lane.
inline void RotateLanes(__m512& x0, __m512& x1, __m512 c, __m512 s) {
  const __m512 r0 = _mm512_sub_ps(Product(x0, c), Product(x1, s));
  const __m512 r1 = _mm512_add_ps(Product(x1, c), Product(x0, s));
  x0 = r0;
  x1 = r1;
}

// x [rope] rotated in place by cos/sin [rope / 2], 16 pairs per step.
void Rotate(float* x, int64_t rope, bool interleaved, const float* cos, const float* sin) {
  const int64_t half = rope / 2;
  // Interleaved pairs: evens and odds of 32 floats (lo = floats 0..15, hi = 16..31), and back.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i lo_back = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_back =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t i = 0; i < half; i += 16) {
    const int64_t pairs = std::min<int64_t>(16, half - i);
    const __mmask16 mp = TailMask(pairs);
    const __m512 c = _mm512_maskz_loadu_ps(mp, cos + i);
    const __m512 s = _mm512_maskz_loadu_ps(mp, sin + i);
    if (interleaved) {
      const __mmask16 m_lo = TailMask(std::min<int64_t>(16, 2 * pairs));
      const __mmask16 m_hi = TailMask(std::max<int64_t>(0, 2 * pairs - 16));
      float* p = x + 2 * i;
      const __m512 lo = _mm512_maskz_loadu_ps(m_lo, p);
      const __m512 hi = _mm512_maskz_loadu_ps(m_hi, p + 16);
      __m512 x0 = _mm512_permutex2var_ps(lo, even, hi);
      __m512 x1 = _mm512_permutex2var_ps(lo, odd, hi);
      RotateLanes(x0, x1, c, s);
      _mm512_mask_storeu_ps(p, m_lo, _mm512_permutex2var_ps(x0, lo_back, x1));
      _mm512_mask_storeu_ps(p + 16, m_hi, _mm512_permutex2var_ps(x0, hi_back, x1));
    } else {
      __m512 x0 = _mm512_maskz_loadu_ps(mp, x + i);
      __m512 x1 = _mm512_maskz_loadu_ps(mp, x + half + i);
      RotateLanes(x0, x1, c, s);
      _mm512_mask_storeu_ps(x + i, mp, x0);
      _mm512_mask_storeu_ps(x + half + i, mp, x1);
    }
  }
}

// Per token: the norm of its latent, then the rotation of its rotary key and of every head's
// rotary query, while its rows are in L1.
void NormRope(const NormRopeArgs& a) {
  const int64_t half = a.rope / 2;
  for (int64_t t = 0; t < a.tokens; ++t) {
    float* row = a.kv + t * a.kv_stride;
    RmsNormRow(row, a.latent, a.norm_weight, a.norm_dtype, a.eps, row);
    const float* cos = a.cos + t * half;
    const float* sin = a.sin + t * half;
    Rotate(row + a.latent, a.rope, a.interleaved, cos, sin);
    for (int64_t h = 0; h < a.heads; ++h) {
      Rotate(a.q + (t * a.heads + h) * a.q_stride + a.q_offset, a.rope, a.interleaved, cos, sin);
    }
  }
}

void LayerNorm(const float* x, int64_t m, int64_t d, const void* weight, const void* bias,
               DType dtype, float eps, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * d;
    const float mean = RowSum(xi, d, [](__m512 v, __m512 acc) { return _mm512_add_ps(v, acc); }) /
                       static_cast<float>(d);
    const __m512 mv = _mm512_set1_ps(mean);
    const float var = RowSum(xi, d,
                             [mv](__m512 v, __m512 acc) {
                               const __m512 t = _mm512_sub_ps(v, mv);
                               return _mm512_fmadd_ps(t, t, acc);
                             }) /
                      static_cast<float>(d);
    const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(var + eps));
    for (int64_t c = 0; c < d; c += 16) {
      const __mmask16 mk = TailMask(std::min<int64_t>(16, d - c));
      const __m512 w = LoadVector(weight, dtype, c, mk);
      const __m512 b = LoadVector(bias, dtype, c, mk);
      const __m512 t = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, xi + c), mv), inv);
      _mm512_mask_storeu_ps(y + i * d + c, mk, _mm512_add_ps(_mm512_mul_ps(t, w), b));
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = TailMask(std::min<int64_t>(16, n - i));
    const __m512 g = _mm512_maskz_loadu_ps(mk, gate + i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, mk, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(mk, up + i)));
  }
}

// 16 lanes at a time; each block's sum in two f64 accumulators (the low and high 8 lanes), added
// at the end in a fixed order.
float ExpWeights(const float* x, int64_t n, float scale, int64_t block, float* w,
                 double* block_mass) {
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mv = minus_inf;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = TailMask(std::min<int64_t>(16, n - i));
    // The new values first: vmaxps returns its second operand when either is NaN (a NaN logit is
    // skipped, as the reference's std::max skips it).
    mv = _mm512_max_ps(_mm512_mask_loadu_ps(minus_inf, mk, x + i), mv);
  }
  const float max = _mm512_reduce_max_ps(mv);
  const __m512 sv = _mm512_set1_ps(max), kv = _mm512_set1_ps(scale);
  for (int64_t b = 0; b * block < n; ++b) {
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); i += 16) {
      const __mmask16 mk = TailMask(std::min<int64_t>(16, n - i));
      const __m512 v = _mm512_maskz_loadu_ps(mk, x + i);
      // Lanes past n and -inf logits weigh exactly 0 (Exp's clamp alone would leave a subnormal).
      const __mmask16 live = _mm512_mask_cmp_ps_mask(mk, v, minus_inf, _CMP_NEQ_UQ);
      const __m512 e = _mm512_maskz_mov_ps(live, Exp(_mm512_mul_ps(_mm512_sub_ps(v, sv), kv)));
      _mm512_mask_storeu_ps(w + i, mk, e);
      const __m256 e_hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1));
      lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
      hi = _mm512_add_pd(hi, _mm512_cvtps_pd(e_hi));
    }
    block_mass[b] = _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
  }
  return max;
}

// 4 accumulators of 16 lanes over steps of 64 values, so that four compare-and-blend chains
// (each step's blend waits for its compare) overlap; each lane keeps the first largest of its
// values, then CombineArgmaxLanes.
int64_t Argmax(const float* x, int64_t n) {
  if (n <= 0) return 0;
  if (n > std::numeric_limits<int32_t>::max()) return RefKernels().argmax(x, n);  // int32 lanes
  constexpr int kAcc = 4;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 best[kAcc];
  __m512i at[kAcc];
  for (int a = 0; a < kAcc; ++a) {
    best[a] = _mm512_set1_ps(x[0]);
    at[a] = _mm512_setzero_si512();
  }
  // Lanes where v (the values from `first` on) is larger take v and its index.
  auto take = [lane](__m512& best_a, __m512i& at_a, __m512 v, __mmask16 up, int64_t first) {
    const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(first)), lane);
    best_a = _mm512_mask_mov_ps(best_a, up, v);
    at_a = _mm512_mask_mov_epi32(at_a, up, index);
  };
  int64_t i = 0;
  for (; i + 16 * kAcc <= n; i += 16 * kAcc) {
    for (int a = 0; a < kAcc; ++a) {
      const __m512 v = _mm512_loadu_ps(x + i + 16 * a);
      take(best[a], at[a], v, _mm512_cmp_ps_mask(best[a], v, _CMP_LT_OQ), i + 16 * a);
    }
  }
  for (; i < n; i += 16) {  // the tail into accumulator 0, still in increasing index order per lane
    const __mmask16 mk = TailMask(std::min<int64_t>(16, n - i));
    const __m512 v = _mm512_maskz_loadu_ps(mk, x + i);
    take(best[0], at[0], v, _mm512_mask_cmp_ps_mask(mk, best[0], v, _CMP_LT_OQ), i);
  }
  alignas(64) float best_lanes[16 * kAcc];
  alignas(64) int32_t at_lanes[16 * kAcc];
  for (int a = 0; a < kAcc; ++a) {
    _mm512_store_ps(best_lanes + 16 * a, best[a]);
    _mm512_store_si512(at_lanes + 16 * a, at[a]);
  }
  return CombineArgmaxLanes(best_lanes, at_lanes, 16 * kAcc);
}

}  // namespace

void FillNormKernels(KernelTable& t) {
  t.rms_norm = RmsNorm;
  t.layer_norm = LayerNorm;
  t.silu_mul = SiluMul;
  t.norm_rope = NormRope;
  t.exp_weights = ExpWeights;
  t.argmax = Argmax;
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_END
