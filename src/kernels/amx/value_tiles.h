// The value product of the AMX attention kernels (attention_queries_amx.cc: 16 queries of one
// head; attention_amx.cc: 16 heads of one query): O[16 rows][dv] += P . V over a block of 64
// positions, with P's two halves (positions 0-31, 32-63: bf16 pairs, 16 rows of 64 bytes) in
// tiles 4 and 5 and V as B tiles: rows of one position pair (32 of them: the block), each of dv
// bf16 pairs (position 2 j in the low half). Each output is one lane of an accumulator tile
// loaded from its f32 row, then the two products in order, then stored: a row's sums never
// depend on the other rows. Include only inside LATENT_AMX_BEGIN ... LATENT_AMX_END, after
// tile_blocks.h (which configures the tiles: every one 16 rows of 64 bytes).
#pragma once

#include <cstdint>

namespace latent::kernels::amx {
namespace {

// Columns [0, 16 CT) of v (the block's first pair row) into o (the first output row); rows of v
// and of o dv values apart.
template <int CT>
void ValueTiles(const uint32_t* v, int64_t dv, float* o) {
  const int64_t ld = dv * 4;                   // bytes between value rows and between output rows
  const uint32_t* v_hi = v + kTileRows * dv;  // position pairs 16-31: positions 32-63
  _tile_loadd(0, o, ld);
  if constexpr (CT > 1) _tile_loadd(1, o + 16, ld);
  if constexpr (CT > 2) _tile_loadd(2, o + 32, ld);
  if constexpr (CT > 3) _tile_loadd(3, o + 48, ld);
  _tile_loadd(6, v, ld);
  _tile_loadd(7, v_hi, ld);
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(0, 5, 7);
  if constexpr (CT > 1) {
    _tile_loadd(6, v + 16, ld);
    _tile_loadd(7, v_hi + 16, ld);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(1, 5, 7);
  }
  if constexpr (CT > 2) {
    _tile_loadd(6, v + 32, ld);
    _tile_loadd(7, v_hi + 32, ld);
    _tile_dpbf16ps(2, 4, 6);
    _tile_dpbf16ps(2, 5, 7);
  }
  if constexpr (CT > 3) {
    _tile_loadd(6, v + 48, ld);
    _tile_loadd(7, v_hi + 48, ld);
    _tile_dpbf16ps(3, 4, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, o, ld);
  if constexpr (CT > 1) _tile_stored(1, o + 16, ld);
  if constexpr (CT > 2) _tile_stored(2, o + 32, ld);
  if constexpr (CT > 3) _tile_stored(3, o + 48, ld);
}

// All dv columns (a multiple of 16), four column tiles at a time.
inline void AddValueProducts(const uint32_t* v, int64_t dv, float* o) {
  int64_t c = 0;
  for (; c + 64 <= dv; c += 64) ValueTiles<4>(v + c, dv, o + c);
  switch ((dv - c) / 16) {
    case 3: ValueTiles<3>(v + c, dv, o + c); break;
    case 2: ValueTiles<2>(v + c, dv, o + c); break;
    case 1: ValueTiles<1>(v + c, dv, o + c); break;
    default: break;
  }
}

}  // namespace
}  // namespace latent::kernels::amx
