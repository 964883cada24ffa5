// How the attention and index-score kernels read a cached row in place (kernels/attention.h,
// kernels/index_scores.h): its element type, and for the fp8 row encoding where its pieces lie.
//
// f32 and bf16 rows hold plain elements. An fp8 row (the paged cache's `--cache-dtype fp8`,
// cache/fp8_rows.h) holds `values` elements as
//
//   [fp8_values e4m3 codes | one f32 scale per fp8_group codes, from byte scales_at |
//    the other values bf16, from byte tail_at]
//
// and element c < fp8_values is code(c) * scale(c / fp8_group): the e4m3 code widened to f32
// exactly, times its group's f32 scale in one f32 multiply, the same product the gather into f32
// (cache::DecodeFp8Row) computes. Every kernel decodes so, in registers, then sums in the same
// order as over f32 rows: its result over fp8 rows equals, bit for bit, its result over the rows
// decoded to f32. Kernels under bf16 products (attention.h) round the rows to bf16 instead: the
// AMX attention over fp8 rows (amx/attention_amx.cc, where amx::AmxTakesAttention) equals itself
// over bf16 rows holding the decoded values rounded. The kernels do not see the cache
// (layering): the caller derives the offsets from cache/fp8_rows.h's layout and passes plain
// numbers.
#pragma once

#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

namespace latent::kernels {

struct RowFormat {
  DType dtype = DType::kF32;  // kF32, kBF16, or kF8E4M3 (the fp8 row encoding)
  // The fp8 encoding's layout (dtype kF8E4M3 only).
  int64_t fp8_values = 0;  // leading values stored as e4m3 codes (byte c holds value c)
  int64_t fp8_group = 0;   // codes per f32 scale
  int64_t scales_at = 0;   // byte offset of the scales ([ceil(fp8_values / fp8_group)] f32)
  int64_t tail_at = 0;     // byte offset of the bf16 values fp8_values, fp8_values + 1, ...

  RowFormat() = default;
  RowFormat(DType plain) : dtype(plain) {}  // NOLINT: plain rows convert from their type
  static RowFormat Fp8(int64_t fp8_values, int64_t fp8_group, int64_t scales_at, int64_t tail_at) {
    RowFormat f(DType::kF8E4M3);
    f.fp8_values = fp8_values;
    f.fp8_group = fp8_group;
    f.scales_at = scales_at;
    f.tail_at = tail_at;
    return f;
  }
};

// The vector kernels read an fp8 row 16 elements at a time from element 0 (8 for AVX2), each
// chunk decoded whole: no chunk may straddle the codes' end or a scale group.
constexpr int64_t kFp8RowChunk = 16;

// Whether the attention and index-score kernels read rows of `format` in place: f32, bf16, and
// fp8 rows whose codes end and groups break at whole chunks (groups a power of two). Others
// (and, for attention, fp8 rows with per-head keys or values: the kernels read fp8 rows only as
// one shared head, MLA's absorbed form) are converted to f32 by the caller first.
inline bool RowsReadInPlace(const RowFormat& format) {
  switch (format.dtype) {
    case DType::kF32:
    case DType::kBF16:
      return true;
    case DType::kF8E4M3:
      return format.fp8_values > 0 && format.fp8_values % kFp8RowChunk == 0 &&
             format.fp8_group >= kFp8RowChunk &&
             (format.fp8_group & (format.fp8_group - 1)) == 0 &&
             format.scales_at >= format.fp8_values && format.tail_at >= format.scales_at;
    default:
      return false;
  }
}

// Element c of a row of `format` as f32: the scalar form of every kernel's loads (the reference
// kernels', and the vector kernels' where they pack rows). Rows may be unaligned.
inline float RowValue(const RowFormat& format, const void* row, int64_t c) {
  const uint8_t* p = static_cast<const uint8_t*>(row);
  uint16_t bf16;
  switch (format.dtype) {
    case DType::kBF16:
      std::memcpy(&bf16, p + 2 * c, 2);
      return BF16ToF32(bf16);
    case DType::kF8E4M3:
      if (c < format.fp8_values) {
        float scale;
        std::memcpy(&scale, p + format.scales_at + 4 * (c / format.fp8_group), 4);
        return F8E4M3ToF32(p[c]) * scale;
      }
      std::memcpy(&bf16, p + format.tail_at + 2 * (c - format.fp8_values), 2);
      return BF16ToF32(bf16);
    default: {
      float v;
      std::memcpy(&v, p + 4 * c, 4);
      return v;
    }
  }
}

}  // namespace latent::kernels
