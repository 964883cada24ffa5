// Cached bf16 rows (one per position: attention keys, DSA index keys) as the A operand of a tile
// product, 16 rows x 32 values a tile: read in place where the 16 rows lie at one stride, as a
// paged cache block holds them, and their dim fills whole tiles; else copied into a stage with
// zeros past the dim and past the real rows. And one A tile against up to 4 B tiles
// (TileProducts). Include only inside LATENT_AMX_BEGIN ... LATENT_AMX_END, after tile_blocks.h.
#pragma once

#include <cstdint>
#include <cstring>

namespace latent::kernels::amx {
namespace {

// Values per staged row for rows of `dim_tiles` tiles: an odd tile count, off one L1 set.
inline int64_t StagedRowValues(int64_t dim_tiles) {
  return TileActivationRowTiles(dim_tiles) * 32;
}

// The 16 rows rows[t .. t + 16) (the first `count` real, the rest zero; dim bf16 values each) as
// an A tile source of dim_tiles tiles: their own memory, or `stage` (16 rows of
// StagedRowValues(dim_tiles)). Sets *ld to the stride in bytes.
inline const uint8_t* RowsAsTiles(const void* const* rows, int64_t t, int64_t count, int64_t dim,
                                  int64_t dim_tiles, uint16_t* stage, int64_t* ld) {
  if (count == kTileRows && dim == dim_tiles * 32) {
    // Addresses as integers: the rows may lie in different blocks of the cache.
    const auto address = [rows, t](int64_t r) { return reinterpret_cast<uintptr_t>(rows[t + r]); };
    const uintptr_t stride = address(1) - address(0);  // modulo 2^64: a negative one too
    bool even = stride != 0;
    for (int64_t r = 2; r < kTileRows && even; ++r) even = address(r) == address(0) + r * stride;
    if (even) {
      *ld = static_cast<int64_t>(stride);
      return static_cast<const uint8_t*>(rows[t]);
    }
  }
  const int64_t row = StagedRowValues(dim_tiles);
  for (int64_t r = 0; r < kTileRows; ++r) {
    uint16_t* dst = stage + r * row;
    const int64_t real = r < count ? dim : 0;
    if (real > 0) std::memcpy(dst, rows[t + r], real * sizeof(uint16_t));
    std::memset(dst + real, 0, (dim_tiles * 32 - real) * sizeof(uint16_t));
  }
  *ld = row * static_cast<int64_t>(sizeof(uint16_t));
  return reinterpret_cast<const uint8_t*>(stage);
}

// out [16 rows][64] f32 (rows of 256 bytes), columns [16 g, 16 g + 16) for g < G: the sum over
// k tiles kk of A . B_g, A in tile 4 (a + 64 kk bytes, rows a_ld bytes apart), B_g in tiles 5-7
// (5 again for the fourth; b + 16 kk b_row + 16 g pairs, rows b_row pairs apart), one
// accumulator per g in tiles 0..G-1, zeroed first. The prefill attention's scores (16 queries x
// 64 positions) and the indexer's dots (16 keys x 64 heads).
template <int G>
void TileProducts(const uint8_t* a, int64_t a_ld, const uint32_t* b, int64_t b_row,
                  int64_t k_tiles, float* out) {
  _tile_zero(0);
  if constexpr (G > 1) _tile_zero(1);
  if constexpr (G > 2) _tile_zero(2);
  if constexpr (G > 3) _tile_zero(3);
  const int64_t b_ld = b_row * 4;
  for (int64_t kk = 0; kk < k_tiles; ++kk) {
    const uint32_t* bk = b + kk * kTileRows * b_row;
    _tile_loadd(4, a + kk * kTileRowBytes, a_ld);
    _tile_loadd(5, bk, b_ld);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (G > 1) {
      _tile_loadd(6, bk + 16, b_ld);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (G > 2) {
      _tile_loadd(7, bk + 32, b_ld);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (G > 3) {
      _tile_loadd(5, bk + 48, b_ld);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  constexpr int64_t ld = 64 * 4;
  _tile_stored(0, out, ld);
  if constexpr (G > 1) _tile_stored(1, out + 16, ld);
  if constexpr (G > 2) _tile_stored(2, out + 32, ld);
  if constexpr (G > 3) _tile_stored(3, out + 48, ld);
}

}  // namespace
}  // namespace latent::kernels::amx
