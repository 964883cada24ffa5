#include "cache/fp8_rows.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "base/cpu_features.h"
#include "tensor/dtype.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace latent::cache {
namespace {

// Every e4m3 code's value (NaN codes NaN): decoding is a table look-up and one multiply.
const std::array<float, 256>& E4M3Values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = F8E4M3ToF32(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

}  // namespace

uint8_t F32ToF8E4M3(float f) {
  const uint32_t bits = F32ToBits(f);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7f;          // NaN
  if (abs >= F32ToBits(448.0f)) return sign | 0x7e;  // saturate (infinity included)
  if (abs < F32ToBits(0.015625f)) {
    // Below the smallest normal (2^-6): a multiple of the subnormal step 2^-9. a * 512 is exact
    // (a power of two); nearbyint rounds half to even in the default rounding mode. 8 steps is
    // the smallest normal, whose code is 0x08 too.
    const float steps = std::nearbyint(BitsToF32(abs) * 512.0f);
    return sign | static_cast<uint8_t>(steps);
  }
  // Normal: keep 3 of f32's 23 mantissa bits, rounding half to even on the 20 dropped (a carry
  // into the exponent is the right result), and rebias the exponent from 127 to 7. Below 448 the
  // result is at most 448 (0x7e).
  const uint32_t rounded = abs + 0x7ffffu + ((abs >> 20) & 1u);
  return sign | static_cast<uint8_t>((rounded >> 20) - (120u << 3));
}

void EncodeFp8RowScalar(const float* src, int64_t values, int64_t fp8_values, uint8_t* dst) {
  uint8_t* scales = dst + fp8_values;  // [groups] f32, unaligned in general
  const int64_t groups = (fp8_values + kFp8Group - 1) / kFp8Group;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * kFp8Group, end = std::min(fp8_values, begin + kFp8Group);
    float amax = 0.0f;
    for (int64_t i = begin; i < end; ++i) {
      const float a = std::fabs(src[i]);
      if (a > amax) amax = a;  // NaN compares false: skipped
    }
    const float scale = amax / kFp8E4M3Max;
    std::memcpy(scales + 4 * g, &scale, 4);
    for (int64_t i = begin; i < end; ++i) {
      // scale 0 (an all-zero group, or an amax below 448 * 2^-149): codes 0, NaN kept.
      dst[i] = scale > 0.0f ? F32ToF8E4M3(src[i] / scale) : (src[i] != src[i] ? 0x7f : 0x00);
    }
  }
  uint8_t* tail = scales + 4 * groups;  // [values - fp8_values] bf16
  for (int64_t i = fp8_values; i < values; ++i) {
    const uint16_t v = F32ToBF16(src[i]);
    std::memcpy(tail + 2 * (i - fp8_values), &v, 2);
  }
}

void DecodeFp8RowScalar(const uint8_t* src, int64_t values, int64_t fp8_values, float* dst) {
  const std::array<float, 256>& table = E4M3Values();
  const uint8_t* scales = src + fp8_values;
  const int64_t groups = (fp8_values + kFp8Group - 1) / kFp8Group;
  for (int64_t g = 0; g < groups; ++g) {
    float scale;
    std::memcpy(&scale, scales + 4 * g, 4);
    const int64_t begin = g * kFp8Group, end = std::min(fp8_values, begin + kFp8Group);
    for (int64_t i = begin; i < end; ++i) dst[i] = table[src[i]] * scale;
  }
  const uint8_t* tail = scales + 4 * groups;
  for (int64_t i = fp8_values; i < values; ++i) {
    uint16_t v;
    std::memcpy(&v, tail + 2 * (i - fp8_values), 2);
    dst[i] = BF16ToF32(v);
  }
}

void EncodeFp8Row(const float* src, int64_t values, int64_t fp8_values, uint8_t* dst) {
  // One row per token and layer per step: not worth a vector path.
  EncodeFp8RowScalar(src, values, fp8_values, dst);
}

#if defined(__x86_64__)
namespace {

// AVX2 + F16C decoding of the e4m3 codes, 8 at a time (the attention's gather reads every cached
// row of a sequence per layer: this is the fp8 cache's read path). e4m3 -> f16 bits by shifting
// (the f16 value is exactly the e4m3 value * 2^-8, subnormals included, as kernels/avx2's LoadF8),
// NaN codes set to the table's NaN, then one multiply by scale * 2^8: exact, so (v * 2^-8) *
// (scale * 2^8) rounds as v * scale does: bit for bit the scalar decoding (scale * 2^8 cannot
// overflow: scale <= FLT_MAX / 448).
__attribute__((target("avx2,f16c"))) void DecodeCodesAvx2(const uint8_t* codes, int64_t n,
                                                          float scale, float* dst) {
  const __m256 scale256 = _mm256_set1_ps(scale * 256.0f);
  const __m128i keep = _mm_set1_epi16(static_cast<int16_t>(0xBF80));
  const __m128i low7 = _mm_set1_epi16(0x7f);
  const __m256 quiet_nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i w = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    __m256 v = _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(w, 7), keep));
    const __m128i nan16 = _mm_cmpeq_epi16(_mm_and_si128(w, low7), low7);
    const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan16));
    v = _mm256_blendv_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), quiet_nan), nan);
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(v, scale256));
  }
  const std::array<float, 256>& table = E4M3Values();
  for (; i < n; ++i) dst[i] = table[codes[i]] * scale;
}

}  // namespace
#endif

void DecodeFp8Row(const uint8_t* src, int64_t values, int64_t fp8_values, float* dst) {
#if defined(__x86_64__)
  if (CpuHasAvx2()) {
    const uint8_t* scales = src + fp8_values;
    const int64_t groups = (fp8_values + kFp8Group - 1) / kFp8Group;
    for (int64_t g = 0; g < groups; ++g) {
      float scale;
      std::memcpy(&scale, scales + 4 * g, 4);
      const int64_t begin = g * kFp8Group;
      DecodeCodesAvx2(src + begin, std::min(kFp8Group, fp8_values - begin), scale, dst + begin);
    }
    const uint8_t* tail = scales + 4 * groups;
    for (int64_t i = fp8_values; i < values; ++i) {
      uint16_t v;
      std::memcpy(&v, tail + 2 * (i - fp8_values), 2);
      dst[i] = BF16ToF32(v);
    }
    return;
  }
#endif
  DecodeFp8RowScalar(src, values, fp8_values, dst);
}

}  // namespace latent::cache
