// Loads of cached rows read in place by the AVX2 attention and index-score kernels
// (kernels/row_format.h): 8 consecutive elements of a row from element c, as f32. Include it
// after avx2_common.h, inside LATENT_AVX2_BEGIN ... LATENT_AVX2_END.
//
// A row reader R has R::Full(format, row, c) (elements c .. c + 7) and R::Part(format, row, c,
// count) (the first `count` < 8; the other lanes 0, no byte past them read).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/row_format.h"

LATENT_AVX2_BEGIN
namespace latent::kernels::avx2 {

// f32 or bf16 rows: element c at byte c * L::kBytes (L: LoadF32 or LoadBF16).
template <class L>
struct PlainRows {
  static __m256 Full(const RowFormat&, const uint8_t* row, int64_t c) {
    return L::Full(row + c * L::kBytes);
  }
  static __m256 Part(const RowFormat&, const uint8_t* row, int64_t c, int64_t count) {
    return L::Part(row + c * L::kBytes, count);
  }
};

// Rows in the fp8 encoding. A chunk lies wholly in the codes (within one scale group) or wholly
// in the bf16 tail (RowsReadInPlace). Codes decode as cache::DecodeFp8Row does, bit for bit:
// e4m3 -> f16 bits by shifting (exactly the e4m3 value * 2^-8; avx2_common.h's LoadF8), NaN
// codes set to +-NaN (0x7fc00000, the sign kept), then one exact-equivalent multiply by
// scale * 2^8 (see avx512/row_loads_avx512.h).
struct Fp8Rows {
  static __m256 Decode(__m128i codes, const RowFormat& f, const uint8_t* row, int64_t c) {
    float scale;
    std::memcpy(&scale, row + f.scales_at + 4 * (c >> __builtin_ctzll(f.fp8_group)), 4);
    const __m128i w = _mm_cvtepi8_epi16(codes);
    const __m128i low7 = _mm_set1_epi16(0x7f);
    __m256 v = _mm256_cvtph_ps(
        _mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16(static_cast<int16_t>(0xBF80))));
    const __m128i nan16 = _mm_cmpeq_epi16(_mm_and_si128(w, low7), low7);
    const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan16));
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
    const __m256 quiet_nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
    v = _mm256_blendv_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), quiet_nan), nan);
    return _mm256_mul_ps(v, _mm256_set1_ps(scale * 256.0f));
  }
  static __m256 Full(const RowFormat& f, const uint8_t* row, int64_t c) {
    if (c >= f.fp8_values) return LoadBF16::Full(row + f.tail_at + 2 * (c - f.fp8_values));
    return Decode(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c)), f, row, c);
  }
  static __m256 Part(const RowFormat& f, const uint8_t* row, int64_t c, int64_t count) {
    if (c >= f.fp8_values) return LoadBF16::Part(row + f.tail_at + 2 * (c - f.fp8_values), count);
    alignas(16) uint8_t codes[16] = {};
    std::memcpy(codes, row + c, static_cast<size_t>(count));
    // The lanes past `count` 0, not 0 * scale (NaN under an infinite scale).
    const __m256 v = Decode(_mm_load_si128(reinterpret_cast<const __m128i*>(codes)), f, row, c);
    return _mm256_and_ps(_mm256_castsi256_ps(TailMask(count)), v);
  }
};

}  // namespace latent::kernels::avx2
LATENT_AVX2_END
