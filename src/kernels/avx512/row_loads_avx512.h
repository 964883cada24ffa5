// Loads of cached rows read in place by the AVX-512 attention and index-score kernels
// (kernels/row_format.h): 16 consecutive elements of a row from element c, as f32. Include it
// after avx512_common.h, inside LATENT_AVX512_BEGIN ... LATENT_AVX512_END.
//
// A row reader R has R::Full(format, row, c) (elements c .. c + 15) and R::Part(format, row, c,
// mask) (the lanes in mask; the others 0, no byte past them read), and R::PrefetchAt(format, c,
// width): the byte offset in a row to prefetch at the chunk from element c, or -1.
#pragma once

#include "kernels/avx512/intrinsics.h"

#include <cstdint>
#include <cstring>

#include "kernels/row_format.h"

LATENT_AVX512_BEGIN
namespace latent::kernels::avx512 {

// f32 or bf16 rows: element c at byte c * L::kBytes (L: LoadF32 or LoadBF16).
template <class L>
struct PlainRows {
  static __m512 Full(const RowFormat&, const uint8_t* row, int64_t c) {
    return L::Full(row + c * L::kBytes);
  }
  static __m512 Part(const RowFormat&, const uint8_t* row, int64_t c, __mmask16 m) {
    return L::Part(row + c * L::kBytes, m);
  }
  // One cache line per step (each other step for bf16's 32 bytes).
  static int64_t PrefetchAt(const RowFormat&, int64_t c, int64_t) {
    return L::kBytes == 4 || c % 32 == 0 ? c * L::kBytes : -1;
  }
};

// Rows in the fp8 encoding. A chunk lies wholly in the codes (within one scale group) or wholly
// in the bf16 tail (RowsReadInPlace). Codes decode as cache::DecodeFp8Row does: e4m3 -> f16 bits
// by shifting (exactly the e4m3 value * 2^-8, subnormals included; avx512_common.h's LoadF8),
// NaN codes set to +-NaN (0x7fc00000, the sign kept: F8E4M3ToF32's), then one multiply by
// scale * 2^8, exact, so (v * 2^-8) * (scale * 2^8) rounds as v * scale: bit for bit the gather's
// f32 value (scale * 2^8 cannot overflow: an encoded scale is at most FLT_MAX / 448).
struct Fp8Rows {
  static __m512 Decode(__m128i codes, const RowFormat& f, const uint8_t* row, int64_t c) {
    float scale;
    std::memcpy(&scale, row + f.scales_at + 4 * (c >> __builtin_ctzll(f.fp8_group)), 4);
    const __m256i w = _mm256_slli_epi16(_mm256_cvtepi8_epi16(codes), 7);
    const __m512 v =
        _mm512_cvtph_ps(_mm256_and_si256(w, _mm256_set1_epi16(static_cast<int16_t>(0xBF80))));
    const __m128i low7 = _mm_set1_epi8(0x7f);
    const __mmask16 nan = _mm_cmpeq_epi8_mask(_mm_and_si128(codes, low7), low7);
    // Lanes in `nan`: (v & sign) | quiet NaN (ternary-logic 0xEA: (A & B) | C).
    const __m512i fixed = _mm512_mask_ternarylogic_epi32(
        _mm512_castps_si512(v), nan, _mm512_set1_epi32(static_cast<int32_t>(0x80000000u)),
        _mm512_set1_epi32(0x7fc00000), 0xEA);
    return _mm512_mul_ps(_mm512_castsi512_ps(fixed), _mm512_set1_ps(scale * 256.0f));
  }
  static __m512 Full(const RowFormat& f, const uint8_t* row, int64_t c) {
    if (c >= f.fp8_values) return LoadBF16::Full(row + f.tail_at + 2 * (c - f.fp8_values));
    return Decode(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c)), f, row, c);
  }
  static __m512 Part(const RowFormat& f, const uint8_t* row, int64_t c, __mmask16 m) {
    if (c >= f.fp8_values) return LoadBF16::Part(row + f.tail_at + 2 * (c - f.fp8_values), m);
    return _mm512_maskz_mov_ps(m, Decode(_mm_maskz_loadu_epi8(m, row + c), f, row, c));
  }
  // The row's bytes in cache lines, one per chunk: a 576-value latent row (656 bytes) takes 11.
  static int64_t PrefetchAt(const RowFormat& f, int64_t c, int64_t width) {
    const int64_t at = 4 * c;
    return at < f.tail_at + 2 * (width - f.fp8_values) ? at : -1;
  }
};

}  // namespace latent::kernels::avx512
LATENT_AVX512_END
