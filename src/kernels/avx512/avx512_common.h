// Shared pieces of the AVX-512 kernels. Include it only from files under kernels/avx512/, after
// every other header and inside LATENT_AVX512_BEGIN ... LATENT_AVX512_END: the target pragma then
// applies to these functions and to the kernels, while the standard library stays baseline x86-64
// (no global -mavx512f, so no AVX-512 code leaks into inline functions other files share; the
// binary still runs on CPUs without AVX-512, where dispatch picks the reference kernels).
#pragma once

#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

// clang-format off
#if defined(LATENT_EMULATE_AVX512)  // see kernels/avx512/intrinsics.h
#define LATENT_AVX512_BEGIN
#define LATENT_AVX512_END
#elif defined(__clang__)
#define LATENT_AVX512_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2\"))), apply_to = function)")
#define LATENT_AVX512_END _Pragma("clang attribute pop")
#else
#define LATENT_AVX512_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2\")")
#define LATENT_AVX512_END _Pragma("GCC pop_options")
#endif
// clang-format on

LATENT_AVX512_BEGIN
namespace latent::kernels::avx512 {

// Sum of the 16 lanes, always in the same order (every kernel uses this one tree).
// Calls f.template operator()<R>() with R = min(rows, Max) (at least 1) as a compile-time
// constant: register tiles are templates on their row count, and the last tile of a batch may
// be short.
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

#include "kernels/blocked_rows.inc"

// v through an empty asm statement: GCC then keeps it in a register for all its uses instead of
// folding its load into each one, and cannot fuse the instruction that made it with the one that
// uses it. The emulated build's 512-bit vectors have no register: there it stays in memory.
template <class V>
inline V InRegister(V v) {
#if defined(LATENT_EMULATE_AVX512)
  __asm__("" : "+m"(v));
#else
  __asm__("" : "+v"(v));
#endif
  return v;
}

inline float ReduceAdd(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  b = _mm_add_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

inline float ReduceMax(__m512 v) {
  const __m256 a = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 b = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_max_ps(b, _mm_movehl_ps(b, b));
  b = _mm_max_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

inline __mmask16 TailMask(int64_t count) {  // count in [0, 16]
  return static_cast<__mmask16>((1u << count) - 1u);
}

// Stores `chunks` accumulators of 16 lanes at y: the first `full` whole, the rest under `tail`.
inline void StoreChunks(float* y, const __m512* acc, int64_t chunks, int64_t full, __mmask16 tail) {
  for (int64_t t = 0; t < chunks; ++t) {
    if (t < full) {
      _mm512_storeu_ps(y + t * 16, acc[t]);
    } else {
      _mm512_mask_storeu_ps(y + t * 16, tail, acc[t]);
    }
  }
}

// exp(x) for 16 lanes: Cody-Waite reduction by ln 2, Cephes' degree-5 polynomial (about 1 ulp),
// 2^n by vscalefps (overflow gives +inf, underflow 0 under FTZ). NaN stays NaN.
inline __m512 Exp(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)), _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

inline float ExpScalar(float x) { return _mm512_cvtss_f32(Exp(_mm512_set1_ps(x))); }

inline void ScaleRow(float* row, int64_t d, float factor) {
  const __m512 f = _mm512_set1_ps(factor);
  for (int64_t c = 0; c < d; c += 16) {
    const __mmask16 m = TailMask(std::min<int64_t>(16, d - c));
    _mm512_mask_storeu_ps(row + c, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + c), f));
  }
}

inline void DivideRow(float* row, int64_t d, float divisor) {
  const __m512 f = _mm512_set1_ps(divisor);
  for (int64_t c = 0; c < d; c += 16) {
    const __mmask16 m = TailMask(std::min<int64_t>(16, d - c));
    _mm512_mask_storeu_ps(row + c, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, row + c), f));
  }
}

// A 16 x 16 transpose of 4-byte elements: r[j] holds row j's 16 elements; afterwards line[p]
// holds element p of rows 0..15 (row j at element j). 64 shuffles, all in registers.
inline void Transpose16x16(const __m512i (&r)[16], __m512i (&line)[16]) {
  // Per 128-bit lane L (elements 4 L .. 4 L + 3 of each row): t[2 i], t[2 i + 1] interleave
  // rows 2 i and 2 i + 1; u[4 i + c] holds rows 4 i .. 4 i + 3 of element 4 L + c.
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // Element 4 L + c: lane L of u[c], u[4 + c], u[8 + c], u[12 + c] (rows 0-3, 4-7, 8-11, 12-15).
  for (int c = 0; c < 4; ++c) {
    const __m512i ab_lo = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i ab_hi = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i cd_lo = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i cd_hi = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
    line[0 + c] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(2, 0, 2, 0));
    line[4 + c] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(3, 1, 3, 1));
    line[8 + c] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(2, 0, 2, 0));
    line[12 + c] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// Positions per online-softmax block of the attention kernels that run many queries at once.
inline constexpr int64_t kSoftmaxBlock = 64;

// One query's online-softmax step over a block: s [kSoftmaxBlock] holds its scaled scores, those
// in [first, rows) (first < rows) real. Raises the running max *mx (rescaling the unnormalised
// output o [dv] and *sum when it grows), then leaves exp(s - max) in s (0 outside [first, rows))
// and adds them to *sum. The caller then adds s . values to o. first > 0: a sliding window's
// first block (the same sums as with first 0 where first is 0).
inline void OnlineSoftmaxBlock(float* s, int64_t rows, float* mx, float* sum, float* o,
                               int64_t dv, int64_t first = 0) {
  __mmask16 m[4];
  for (int v = 0; v < 4; ++v) {
    m[v] = TailMask(std::clamp<int64_t>(rows - 16 * v, 0, 16)) &
           static_cast<__mmask16>(~TailMask(std::clamp<int64_t>(first - 16 * v, 0, 16)));
  }
  __m512 bm = _mm512_set1_ps(-INFINITY);
  for (int v = 0; v < 4; ++v) bm = _mm512_mask_max_ps(bm, m[v], bm, _mm512_load_ps(s + 16 * v));
  const float block_max = ReduceMax(bm);
  if (block_max > *mx) {
    if (*mx != -INFINITY) {
      const float r = ExpScalar(*mx - block_max);
      ScaleRow(o, dv, r);
      *sum *= r;
    }
    *mx = block_max;
  }
  // Every score so far -inf: they weigh 0 (exp(-inf - -inf) would be NaN).
  const __m512 mv = _mm512_set1_ps(*mx == -INFINITY ? 0.0f : *mx);
  __m512 e[4];
  for (int v = 0; v < 4; ++v) {
    e[v] = _mm512_maskz_mov_ps(m[v], Exp(_mm512_sub_ps(_mm512_load_ps(s + 16 * v), mv)));
    _mm512_store_ps(s + 16 * v, e[v]);
  }
  *sum += ReduceAdd(_mm512_add_ps(_mm512_add_ps(e[0], e[1]), _mm512_add_ps(e[2], e[3])));
}

// Weight decoders: 16 consecutive weights at p as f32. Part() reads only the lanes in the mask
// (the others are 0), so tails never touch memory past the tensor. Pointers may be unaligned.
// kDecodeRows (weight rows per tile at m = 1) and kPrefetch (software prefetch distance in bytes
// in decode) were tuned by bench/kernels on 4096x4096 weights streamed from DRAM.
struct LoadF32 {
  static constexpr int kBytes = 4;
  static constexpr bool kFp8 = false;
  static constexpr int kDecodeRows = 4;
  static constexpr int64_t kPrefetch = 2048;
  static __m512 Full(const uint8_t* p) { return _mm512_loadu_ps(p); }
  static __m512 Part(const uint8_t* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};

struct LoadBF16 {  // bf16 is the high half of an f32
  static constexpr int kBytes = 2;
  static constexpr bool kFp8 = false;
  static constexpr int kDecodeRows = 4;
  static constexpr int64_t kPrefetch = 2048;
  static __m512 Widen(__m256i v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
  }
  static __m512 Full(const uint8_t* p) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 Part(const uint8_t* p, __mmask16 m) {
    return Widen(_mm256_maskz_loadu_epi16(m, p));
  }
};

struct LoadF16 {
  static constexpr int kBytes = 2;
  static constexpr bool kFp8 = false;
  static constexpr int kDecodeRows = 4;
  static constexpr int64_t kPrefetch = 2048;
  static __m512 Full(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 Part(const uint8_t* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
};

// fp8 e4m3fn -> f16 bits by shifting (sign-extend to 16 bits, << 7, keep sign|exponent|mantissa):
// the f16 value is exactly the e4m3 value * 2^-8, subnormals included (e4m3's exponent bias 7
// against f16's 15). Callers fold the 2^8 into the block scale. NaN (0x7f/0xff) decodes as
// +-480 instead: checkpoints hold none.
struct LoadF8 {
  static constexpr int kBytes = 1;
  static constexpr bool kFp8 = true;
  static constexpr int kDecodeRows = 8;
  static constexpr int64_t kPrefetch = 4096;
  static __m512 Widen(__m128i b) {
    const __m256i w = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);
    return _mm512_cvtph_ps(_mm256_and_si256(w, _mm256_set1_epi16(static_cast<int16_t>(0xBF80))));
  }
  static __m512 Full(const uint8_t* p) {
    return Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static __m512 Part(const uint8_t* p, __mmask16 m) { return Widen(_mm_maskz_loadu_epi8(m, p)); }
};
constexpr float kF8Unscale = 256.0f;  // LoadF8 yields value * 2^-8

// 16 consecutive elements of a norm weight/bias vector (f32, bf16 or f16) as f32.
inline __m512 LoadVector(const void* base, DType dtype, int64_t i, __mmask16 m) {
  const uint8_t* p = static_cast<const uint8_t*>(base);
  switch (dtype) {
    case DType::kBF16:
      return LoadBF16::Part(p + 2 * i, m);
    case DType::kF16:
      return LoadF16::Part(p + 2 * i, m);
    default:
      return LoadF32::Part(p + 4 * i, m);
  }
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_END
