// AVX-512 RMSNorm, LayerNorm and SiLU-mul. Each row is normalised on its own (the same code
// whatever m is); the per-element formulas are those of the reference, only the sums run in a
// different order.
#include <algorithm>
#include <cmath>
#include <cstdint>

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

void RmsNorm(const float* x, int64_t m, int64_t d, const void* weight, DType weight_dtype,
             float eps, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * d;
    const float sum_sq =
        RowSum(xi, d, [](__m512 v, __m512 acc) { return _mm512_fmadd_ps(v, v, acc); });
    const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(sum_sq / static_cast<float>(d) + eps));
    for (int64_t c = 0; c < d; c += 16) {
      const __mmask16 mk = TailMask(std::min<int64_t>(16, d - c));
      const __m512 w = LoadVector(weight, weight_dtype, c, mk);
      const __m512 v = _mm512_mul_ps(w, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, xi + c), inv));
      _mm512_mask_storeu_ps(y + i * d + c, mk, v);
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

}  // namespace

void FillNormKernels(KernelTable& t) {
  t.rms_norm = RmsNorm;
  t.layer_norm = LayerNorm;
  t.silu_mul = SiluMul;
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_END
