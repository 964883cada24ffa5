// AVX2 RMSNorm, LayerNorm, SiLU-mul and MLA's fused norm + rotary embedding. Each row is
// normalised on its own (the same code whatever m is); the per-element formulas are those of the
// reference, only the sums run in a different (fixed) order. The rotation is bit-identical to the
// reference's (every product rounded, no FMA).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/argmax_lanes.h"
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/kernel_table.h"
// Last: defines the AVX2 helpers under the target pragma.
#include "kernels/avx2/avx2_common.h"

LATENT_AVX2_BEGIN
namespace latent::kernels::avx2 {
namespace {

// Sum of f(x[c]) over a row, with 4 accumulators over 32-wide steps, then a fixed combine.
template <class F>
float RowSum(const float* x, int64_t d, F f) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t c = 0;
  for (; c + 32 <= d; c += 32) {
    a0 = f(_mm256_loadu_ps(x + c), a0);
    a1 = f(_mm256_loadu_ps(x + c + 8), a1);
    a2 = f(_mm256_loadu_ps(x + c + 16), a2);
    a3 = f(_mm256_loadu_ps(x + c + 24), a3);
  }
  for (; c < d; c += 8) {
    const int64_t count = std::min<int64_t>(8, d - c);
    a0 = _mm256_blendv_ps(a0, f(LoadPart(x + c, count), a0), _mm256_castsi256_ps(TailMask(count)));
  }
  return ReduceAdd(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

void RmsNormRow(const float* x, int64_t d, const void* weight, DType weight_dtype, float eps,
                float* y) {
  const float sum_sq =
      RowSum(x, d, [](__m256 v, __m256 acc) { return _mm256_fmadd_ps(v, v, acc); });
  const __m256 inv = _mm256_set1_ps(1.0f / std::sqrt(sum_sq / static_cast<float>(d) + eps));
  for (int64_t c = 0; c < d; c += 8) {
    const int64_t count = std::min<int64_t>(8, d - c);
    const __m256 w = LoadVector(weight, weight_dtype, c, count);
    const __m256 v = _mm256_mul_ps(w, _mm256_mul_ps(LoadPart(x + c, count), inv));
    StorePart(y + c, count, v);
  }
}

void RmsNorm(const float* x, int64_t m, int64_t d, const void* weight, DType weight_dtype,
             float eps, float* y) {
  for (int64_t i = 0; i < m; ++i) RmsNormRow(x + i * d, d, weight, weight_dtype, eps, y + i * d);
}

// A rounded product: kept out of GCC's reach, which would otherwise fuse it with the following
// add into an FMA (one rounding fewer than the reference's rotation).
inline __m256 Product(__m256 a, __m256 b) {
  __m256 p = _mm256_mul_ps(a, b);
  __asm__("" : "+x"(p));
  return p;
}

// x [rope] rotated in place by cos/sin [rope / 2].
// Interleaved pairs (2i, 2i + 1): 4 pairs per vector, with cos/sin duplicated per pair and the
// pair swapped: x0' = x0 c + x1 (-s), x1' = x1 c + x0 s: the reference's rounded products and
// sums (negation is exact). Halves (i, i + rope / 2): 8 pairs per step.
void Rotate(float* x, int64_t rope, bool interleaved, const float* cos, const float* sin) {
  const int64_t half = rope / 2;
  if (interleaved) {
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    const __m256 negate_even = _mm256_castsi256_ps(
        _mm256_setr_epi32(INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0));
    for (int64_t i = 0; i < half; i += 4) {
      const int64_t pairs = std::min<int64_t>(4, half - i);
      const __m256 c = _mm256_permutevar8x32_ps(LoadPart(cos + i, pairs), dup);
      const __m256 s = _mm256_xor_ps(_mm256_permutevar8x32_ps(LoadPart(sin + i, pairs), dup),
                                     negate_even);
      float* p = x + 2 * i;
      const __m256 v = LoadPart(p, 2 * pairs);
      const __m256 swapped = _mm256_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1));
      StorePart(p, 2 * pairs, _mm256_add_ps(Product(v, c), Product(swapped, s)));
    }
    return;
  }
  for (int64_t i = 0; i < half; i += 8) {
    const int64_t pairs = std::min<int64_t>(8, half - i);
    const __m256 c = LoadPart(cos + i, pairs);
    const __m256 s = LoadPart(sin + i, pairs);
    const __m256 x0 = LoadPart(x + i, pairs);
    const __m256 x1 = LoadPart(x + half + i, pairs);
    StorePart(x + i, pairs, _mm256_sub_ps(Product(x0, c), Product(x1, s)));
    StorePart(x + half + i, pairs, _mm256_add_ps(Product(x1, c), Product(x0, s)));
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
    const float mean = RowSum(xi, d, [](__m256 v, __m256 acc) { return _mm256_add_ps(v, acc); }) /
                       static_cast<float>(d);
    const __m256 mv = _mm256_set1_ps(mean);
    const float var = RowSum(xi, d,
                             [mv](__m256 v, __m256 acc) {
                               const __m256 t = _mm256_sub_ps(v, mv);
                               return _mm256_fmadd_ps(t, t, acc);
                             }) /
                      static_cast<float>(d);
    const __m256 inv = _mm256_set1_ps(1.0f / std::sqrt(var + eps));
    for (int64_t c = 0; c < d; c += 8) {
      const int64_t count = std::min<int64_t>(8, d - c);
      const __m256 w = LoadVector(weight, dtype, c, count);
      const __m256 b = LoadVector(bias, dtype, c, count);
      const __m256 t = _mm256_mul_ps(_mm256_sub_ps(LoadPart(xi + c, count), mv), inv);
      StorePart(y + i * d + c, count, _mm256_add_ps(_mm256_mul_ps(t, w), b));
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t count = std::min<int64_t>(8, n - i);
    const __m256 g = LoadPart(gate + i, count);
    const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    StorePart(out + i, count, _mm256_mul_ps(s, LoadPart(up + i, count)));
  }
}

// 8 lanes at a time; each block's sum in two f64 accumulators (the low and high 4 lanes), added
// at the end in a fixed order.
float ExpWeights(const float* x, int64_t n, float scale, int64_t block, float* w,
                 double* block_mass) {
  const __m256 minus_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 mv = minus_inf;
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t count = std::min<int64_t>(8, n - i);
    const __m256 tail = _mm256_castsi256_ps(TailMask(count));
    // The new values first: vmaxps returns its second operand when either is NaN, so a NaN logit
    // is skipped (as the reference's std::max skips it) rather than replacing the running max.
    mv = _mm256_max_ps(_mm256_blendv_ps(minus_inf, LoadPart(x + i, count), tail), mv);
  }
  const float max = ReduceMax(mv);
  const __m256 sv = _mm256_set1_ps(max), kv = _mm256_set1_ps(scale);
  for (int64_t b = 0; b * block < n; ++b) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); i += 8) {
      const int64_t count = std::min<int64_t>(8, n - i);
      const __m256 v = LoadPart(x + i, count);
      // Lanes past n and -inf logits weigh exactly 0.
      const __m256 live = _mm256_and_ps(_mm256_castsi256_ps(TailMask(count)),
                                        _mm256_cmp_ps(v, minus_inf, _CMP_NEQ_UQ));
      const __m256 e = _mm256_and_ps(live, Exp(_mm256_mul_ps(_mm256_sub_ps(v, sv), kv)));
      StorePart(w + i, count, e);
      lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
      hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    const __m256d s = _mm256_add_pd(lo, hi);
    const __m128d pair = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    block_mass[b] = _mm_cvtsd_f64(_mm_add_sd(pair, _mm_unpackhi_pd(pair, pair)));
  }
  return max;
}

// 4 accumulators of 8 lanes over steps of 32 values, so that four compare-and-blend chains
// overlap; each lane keeps the first largest of its values, then CombineArgmaxLanes.
int64_t Argmax(const float* x, int64_t n) {
  if (n <= 0) return 0;
  if (n > std::numeric_limits<int32_t>::max()) return RefKernels().argmax(x, n);  // int32 lanes
  constexpr int kAcc = 4;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 best[kAcc];
  __m256i at[kAcc];
  for (int a = 0; a < kAcc; ++a) {
    best[a] = _mm256_set1_ps(x[0]);
    at[a] = _mm256_setzero_si256();
  }
  // Lanes where v (the values from `first` on) is larger take v and its index.
  auto take = [lane](__m256& best_a, __m256i& at_a, __m256 v, __m256 up, int64_t first) {
    const __m256i index = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(first)), lane);
    best_a = _mm256_blendv_ps(best_a, v, up);
    at_a = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(at_a), _mm256_castsi256_ps(index), up));
  };
  int64_t i = 0;
  for (; i + 8 * kAcc <= n; i += 8 * kAcc) {
    for (int a = 0; a < kAcc; ++a) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * a);
      take(best[a], at[a], v, _mm256_cmp_ps(best[a], v, _CMP_LT_OQ), i + 8 * a);
    }
  }
  for (; i < n; i += 8) {  // the tail into accumulator 0, still in increasing index order per lane
    const int64_t count = std::min<int64_t>(8, n - i);
    const __m256 v = LoadPart(x + i, count);
    const __m256 up =
        _mm256_and_ps(_mm256_cmp_ps(best[0], v, _CMP_LT_OQ), _mm256_castsi256_ps(TailMask(count)));
    take(best[0], at[0], v, up, i);
  }
  alignas(32) float best_lanes[8 * kAcc];
  alignas(32) int32_t at_lanes[8 * kAcc];
  for (int a = 0; a < kAcc; ++a) {
    _mm256_store_ps(best_lanes + 8 * a, best[a]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(at_lanes + 8 * a), at[a]);
  }
  return CombineArgmaxLanes(best_lanes, at_lanes, 8 * kAcc);
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

}  // namespace latent::kernels::avx2
LATENT_AVX2_END
