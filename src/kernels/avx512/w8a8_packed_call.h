// One W8A8 linear call over the packed int8 layout (kernels/tile_pack.h, kW8A8PackK), shared by
// the kernels that read it: vpdpbusd (avx512/linear_w8a8_vnni_packed.cc) and AMX's TDPBUSD
// (amx/linear_w8a8_amx.cc). Both sum (xq + 128) * q in int32 lanes, exactly, in any order, and
// end with the reference's formula here:
//
//   y[m, r] = float(acc - 128 * row_sums[r]) * (sx[m] * s[r])
//
// Include only inside a target region with AVX-512 F/BW/VL/DQ, after avx512_common.h and
// quantize_u8.h, with kernels/activation_rows.h, kernels/tile_pack.h and <algorithm> included
// before the region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace latent::kernels::avx512 {
// Internal linkage, as in bf16_rows.h: its includers differ in their targets.
namespace {

// x: rows of u8 = xq + 128 padded with 128 (kp values; AMX's rows one spare tile longer where
// their tile count is even: MakeW8A8PackedCall).
struct W8A8PackedCall : PackedCall<uint8_t> {
  const float* sx;          // [m] activation row scales
  const uint8_t* scale;     // f32 [n] (the view's rows), possibly unaligned
  const int32_t* row_sums;  // [n] (the view's rows)
};

// The call for x [m, k] against w (a view of a packed W8A8 weight), its activations quantized
// into this thread's buffer of max(m, rows) rows of row_tiles(j.tiles) tiles (64 values each;
// the vpdpbusd kernel's rows are j.kp long, AMX's may hold a spare tile: tile_blocks.h): rows past
// m (AMX's whole 16-row tiles) and values past k hold xq = 0.
template <class RowTiles>
W8A8PackedCall MakeW8A8PackedCall(const float* x, int64_t m, const WeightRef& w, float* y,
                                  int64_t rows, RowTiles row_tiles) {
  w.ExpectPacked(PackedLayout::kW8A8QuadTiles);  // both kernels are also called directly
  W8A8PackedCall j;
  static_cast<PackedCall<uint8_t>&>(j) = MakePackedCall<uint8_t>(w, m, y, kW8A8PackK);
  const int64_t k = w.k, stride = row_tiles(j.tiles) * kW8A8PackK;  // bytes per row
  const auto quantize = [k, stride](const float* row, uint8_t* out) {
    return QuantizeRowU8(row, k, stride, out);
  };
  const auto [xu, sx] = QuantizeActivationRows<uint8_t>(x, m, k, stride, quantize, rows);
  if (rows > m) {
    std::memset(const_cast<uint8_t*>(xu) + m * stride, 128,
                static_cast<size_t>((rows - m) * stride));
  }
  j.x = xu;
  j.sx = sx;
  j.scale = static_cast<const uint8_t*>(w.scale) + 4 * w.scale_row0;
  j.row_sums = w.row_sums + w.scale_row0;
  return j;
}

// y for activation rows [m0, m0 + rows) and column blocks [b, b + blocks) from their sums acc
// (rows of ld int32, column 0 = packed row 16 b), for the packed rows inside the view only.
void FinishW8A8(const W8A8PackedCall& j, const int32_t* acc, int64_t ld, int64_t m0, int64_t rows,
                int64_t b, int64_t blocks) {
  for (int64_t s = 0; s < blocks; ++s) {
    const int64_t start = (b + s) * kPackRows;
    const int64_t first = std::max(start, j.row0), last = std::min(start + kPackRows, j.row0 + j.n);
    if (last <= first) continue;
    const __mmask16 mask = TailMask(last - first);
    const int64_t col = first - j.row0;  // the view's row of lane 0 below
    const __m512i sums = _mm512_slli_epi32(_mm512_maskz_loadu_epi32(mask, j.row_sums + col), 7);
    const __m512 scales = _mm512_maskz_loadu_ps(mask, j.scale + 4 * col);
    for (int64_t r = 0; r < rows; ++r) {
      const __m512i dot = _mm512_sub_epi32(
          _mm512_maskz_loadu_epi32(mask, acc + r * ld + s * kPackRows + (first - start)), sums);
      const __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(dot),
                                     _mm512_mul_ps(_mm512_set1_ps(j.sx[m0 + r]), scales));
      _mm512_mask_storeu_ps(j.y + (m0 + r) * j.n + col, mask, y);
    }
  }
}

}  // namespace
}  // namespace latent::kernels::avx512
