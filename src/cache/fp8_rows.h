// The fp8 row encoding of the paged cache (FlashMLA's fp8 KV layout, DeepSeek V3.2's indexer
// keys): a row of `values` f32 values whose first `fp8_values` are stored as float8_e4m3fn in
// groups of kFp8Group, each group with one f32 scale (the group's amax / 448), and whose remaining
// values (the rotary key of an MLA latent row) as bf16:
//
//   [fp8_values e4m3 codes | ceil(fp8_values / 128) f32 scales | values - fp8_values bf16]
//
// 512 + 16 + 128 = 656 bytes for DeepSeek V3's latent row (512 latent + 64 rotary values), 132
// for a 128-value indexer key. A row's scales depend on that row alone, so a token's stored row
// never depends on what else was in its step (batch invariance holds under fp8 rows).
#pragma once

#include <cstdint>

namespace latent::cache {

constexpr int64_t kFp8Group = 128;       // Values per f32 scale.
constexpr float kFp8E4M3Max = 448.0f;    // The largest finite float8_e4m3fn.

// f32 -> float8_e4m3fn, round to nearest even, saturating: magnitudes of 448 or more (infinity
// included) become +-448, the largest finite value, rather than NaN (what a scaled cache row
// needs: x / (amax / 448) may round a hair past 448). NaN stays NaN (0x7f, sign kept).
uint8_t F32ToF8E4M3(float f);

// Where an encoded row's pieces start, in bytes: the f32 scales right after the codes, the bf16
// values right after the scales (what a kernel reading rows in place is told:
// kernels/row_format.h).
constexpr int64_t Fp8ScalesAt(int64_t fp8_values) { return fp8_values; }
constexpr int64_t Fp8TailAt(int64_t fp8_values) {
  return Fp8ScalesAt(fp8_values) + 4 * ((fp8_values + kFp8Group - 1) / kFp8Group);
}

// Bytes of one encoded row.
constexpr uint64_t Fp8RowBytes(int64_t values, int64_t fp8_values) {
  return static_cast<uint64_t>(Fp8TailAt(fp8_values) + 2 * (values - fp8_values));
}

// Encodes `values` f32 values (src [values]) into dst [Fp8RowBytes(values, fp8_values)] bytes.
// A group's scale is amax / 448 and each value's code is F32ToF8E4M3(x / scale), round to
// nearest even, saturating at +-448; an all-zero group has scale 0 and zero codes. A NaN value
// keeps its code NaN (the rest of its group is scaled by the others' amax); an infinite one
// makes its group's scale infinite, so the group decodes as NaN: non-finite rows stay
// non-finite, as they would in f32 or bf16 rows.
void EncodeFp8Row(const float* src, int64_t values, int64_t fp8_values, uint8_t* dst);
// Decodes one encoded row back to f32 (dst [values]): code value * scale, bf16 widened.
void DecodeFp8Row(const uint8_t* src, int64_t values, int64_t fp8_values, float* dst);

// The scalar reference of both (the above may use vector instructions; they must match these
// bit for bit, tests/unit/fp8_rows_test.cc).
void EncodeFp8RowScalar(const float* src, int64_t values, int64_t fp8_values, uint8_t* dst);
void DecodeFp8RowScalar(const uint8_t* src, int64_t values, int64_t fp8_values, float* dst);

}  // namespace latent::cache
