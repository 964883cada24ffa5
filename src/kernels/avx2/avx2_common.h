// Shared pieces of the AVX2 kernels (AVX2 + FMA + F16C: Haswell and later, every Zen). Include it
// only from files under kernels/avx2/, after every other header and inside LATENT_AVX2_BEGIN ...
// LATENT_AVX2_END, as avx512/avx512_common.h is: the target pragma applies to these functions and
// the kernels only, so the binary still runs on CPUs without AVX2 (dispatch.cc picks the
// reference kernels there).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

// clang-format off
#if defined(__clang__)
#define LATENT_AVX2_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c\"))), apply_to = function)")
#define LATENT_AVX2_END _Pragma("clang attribute pop")
#else
#define LATENT_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#define LATENT_AVX2_END _Pragma("GCC pop_options")
#endif
// clang-format on

LATENT_AVX2_BEGIN
namespace latent::kernels::avx2 {

// Keeps v in a register where it is made: GCC would otherwise fold a load into every FMA that
// uses it, or hoist a register tile's broadcasts ahead of its FMAs and spill accumulators.
inline __m256 InRegister(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

// Calls f.template operator()<R>() with R = min(rows, Max) (at least 1) as a compile-time
// constant: register tiles are templates on their row count, and the last tile may be short.
template <int Max, class F>
inline void WithRowCount(int64_t rows, F&& f) {
  if constexpr (Max <= 1) {
    f.template operator()<1>();
  } else if (rows >= Max) {
    f.template operator()<Max>();
  } else {
    WithRowCount<Max - 1>(rows, f);
  }
}

// Sum of the 8 lanes, always in the same order (every kernel uses this one tree).
inline float ReduceAdd(__m256 v) {
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  b = _mm_add_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

inline float ReduceMax(__m256 v) {
  __m128 b = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  b = _mm_max_ps(b, _mm_movehl_ps(b, b));
  b = _mm_max_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

// The 8 lane sums of a[0..7] as lanes 0..7, in one fixed tree per vector (adjacent lanes, then
// pairs, then the two 128-bit halves): a[g]'s sum never depends on the other vectors.
inline __m256 Reduce8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]);
  const __m256 t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]);
  const __m256 t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // [a0..a3 low half | a0..a3 high half]
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Lanes [0, count) all ones, the others zero; count in [0, 8].
inline __m256i TailMask(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The first `count` floats at p (the others 0); never reads past them.
inline __m256 LoadPart(const float* p, int64_t count) {
  return _mm256_maskload_ps(p, TailMask(count));
}
inline void StorePart(float* p, int64_t count, __m256 v) {
  _mm256_maskstore_ps(p, TailMask(count), v);
}

// exp(x) for 8 lanes: Cody-Waite reduction by ln 2, Cephes' degree-5 polynomial (about 1 ulp),
// then 2^n in two exact steps 2^(n/2) * 2^(n - n/2), so both factors are normal floats over the
// clamped range (overflow gives +inf, underflow 0 or a subnormal). NaN stays NaN.
inline __m256 Exp(__m256 in) {
  __m256 x = _mm256_max_ps(_mm256_min_ps(in, _mm256_set1_ps(89.0f)), _mm256_set1_ps(-104.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i ni = _mm256_cvtps_epi32(n);  // in [-150, 129]
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
  return _mm256_blendv_ps(e, in, _mm256_cmp_ps(in, in, _CMP_UNORD_Q));  // NaN in, NaN out
}

inline float ExpScalar(float x) { return _mm256_cvtss_f32(Exp(_mm256_set1_ps(x))); }

// Weight decoders: 8 consecutive weights at p as f32. Part() reads only the first `count`
// (the others are 0), so tails never touch memory past the tensor. Pointers may be unaligned.
template <class Self>
struct PartByCopy {  // tails of the narrow types: copied into a zeroed buffer, then decoded
  static __m256 Part(const uint8_t* p, int64_t count) {
    alignas(32) uint8_t buf[32] = {};
    std::memcpy(buf, p, static_cast<size_t>(count * Self::kBytes));
    return Self::Full(buf);
  }
};

struct LoadF32 {
  static constexpr int kBytes = 4;
  static constexpr bool kFp8 = false;
  static __m256 Full(const uint8_t* p) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  }
  static __m256 Part(const uint8_t* p, int64_t count) {
    return LoadPart(reinterpret_cast<const float*>(p), count);
  }
};

struct LoadBF16 : PartByCopy<LoadBF16> {  // bf16 is the high half of an f32
  static constexpr int kBytes = 2;
  static constexpr bool kFp8 = false;
  static __m256 Full(const uint8_t* p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  }
};

struct LoadF16 : PartByCopy<LoadF16> {
  static constexpr int kBytes = 2;
  static constexpr bool kFp8 = false;
  static __m256 Full(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};

// fp8 e4m3fn -> f16 bits by shifting, as avx512's LoadF8: the f16 value is exactly the e4m3
// value * 2^-8 (subnormals included); callers fold the 2^8 into the block scale. NaN encodings
// decode as +-480 instead: checkpoints hold none.
struct LoadF8 : PartByCopy<LoadF8> {
  static constexpr int kBytes = 1;
  static constexpr bool kFp8 = true;
  static __m256 Full(const uint8_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i w = _mm_slli_epi16(_mm_cvtepi8_epi16(b), 7);
    return _mm256_cvtph_ps(_mm_and_si128(w, _mm_set1_epi16(static_cast<int16_t>(0xBF80))));
  }
};
constexpr float kF8Unscale = 256.0f;  // LoadF8 yields value * 2^-8

// int8 (`--quantize int8`): widened exactly; the per-row scale is applied to the output.
struct LoadI8 : PartByCopy<LoadI8> {
  static constexpr int kBytes = 1;
  static constexpr bool kFp8 = false;
  static __m256 Full(const uint8_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
};

// 8 consecutive elements (the first `count`) of a norm weight/bias vector as f32.
inline __m256 LoadVector(const void* base, DType dtype, int64_t i, int64_t count) {
  const uint8_t* p = static_cast<const uint8_t*>(base);
  switch (dtype) {
    case DType::kBF16:
      return count >= 8 ? LoadBF16::Full(p + 2 * i) : LoadBF16::Part(p + 2 * i, count);
    case DType::kF16:
      return count >= 8 ? LoadF16::Full(p + 2 * i) : LoadF16::Part(p + 2 * i, count);
    default:
      return LoadF32::Part(p + 4 * i, std::min<int64_t>(count, 8));
  }
}

}  // namespace latent::kernels::avx2
LATENT_AVX2_END
