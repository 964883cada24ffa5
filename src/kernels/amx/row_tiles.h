// Cached bf16 rows (one per position: attention keys, DSA index keys) as the A operand of a tile
// product: 16 rows x 32 values a tile. Read in place where the 16 rows lie at one stride, as a
// paged cache block holds them, and their dim fills whole tiles; else copied into a stage with
// zeros past the dim and past the real rows. Include only inside LATENT_AMX_BEGIN ...
// LATENT_AMX_END, after tile_blocks.h.
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

}  // namespace
}  // namespace latent::kernels::amx
