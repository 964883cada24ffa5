// The blocking of the AMX kernels, shared by TDPBF16PS over bf16 weights (linear_amx.cc) and
// TDPBUSD over W8A8's int8 weights (linear_w8a8_amx.cc); the fp8 kernel (linear_fp8_amx.cc) has
// a blocking of its own and takes the tile configuration and the activations from here. Both
// read weights packed in 1 KiB tiles of 16 rows x 64 bytes (kernels/tile_pack.h: bf16 pairs, or
// int8 quads for W8A8), which are the B operands as stored, and activation rows of 64 bytes per
// tile (32 bf16 or 64 u8 values), so one blocking serves both; a Kind says which instruction and
// which sums (f32 or int32).
//
// Summation order: each output is one lane of an accumulator tile, zeroed, then one tile product
// per tile of k, in order (an accumulator stored and reloaded between k chunks keeps its value
// exactly). A tile's rows are independent (row r of C only reads row r of A): decode (m <= 16)
// configures its activation and accumulator tiles with m rows, batches use whole 16-row tiles
// over activations whose rows past m exist (their outputs are dropped), and a row's arithmetic is
// the same in both: it does not depend on M, on the other rows, on where it sits in its tile, or
// on the thread that runs its columns (threads split N into whole column blocks).
//
// Decode (m <= 16, one activation tile): 4 accumulators over all of k, one A tile, the 4 weight
// streams of 4 column blocks read in turn into the three B tiles, with software prefetch 4 KiB
// ahead in each (without it the bf16 kernel was a third slower). Batches: groups of 16 column
// blocks, each over blocks of rows (512 KiB of activations per k chunk), k in chunks of 64 tiles;
// per chunk, each pair of column blocks meets every 32-row tile pair of the row block (2 x 2
// accumulators, loaded from and stored to a buffer between chunks), so its weights come from
// memory once per row block, and the block's activations from L2.
//
// Include only inside LATENT_AMX_BEGIN (or _VBMI_BEGIN) ... LATENT_AMX_END (amx_target.h), after
// avx512/avx512_common.h and avx512/bf16_rows.h, with kernels/tile_pack.h and <cstring> included
// before the region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace latent::kernels::amx {
// Internal linkage, as in avx512/bf16_rows.h: its includers' code is their own.
namespace {

constexpr int64_t kTileRows = kPackRows;        // rows of every tile (activations, k steps, sums)
constexpr int64_t kTileRowBytes = 64;           // bytes of every tile row
constexpr int64_t kTileBytes = kPackTileBytes;  // one packed weight tile
constexpr int64_t kPrefetch = 4096;   // decode: software prefetch distance in each weight stream
// Batches: k tiles per pass over the accumulators. Swept on a 2-core Xeon with AMX (wave 2
// session 28): 64 beat 16 by 5-15% (bf16 and int8, m 17-512), level with 128 and with all of k;
// fewer passes store and reload the accumulator tiles fewer times.
constexpr int64_t kChunkK = 64;
constexpr int64_t kGroupBlocks = 16;  // batches: column blocks sharing one accumulator buffer
// Batches: activation bytes per k chunk in one block of rows (rows of chunk tiles x 64 bytes; 128
// rows for bf16 at k >= 2,048). A block's activations stay in L2 while every column pair of a
// group goes past them; one pass over all of a large batch's rows per column pair read them from
// L3 each time. Blocks of 512 KiB gained 5-10% in the engine's 2,048-row prefill chunks
// (session 28); 256 KiB and 1 MiB measured level with it.
constexpr int64_t kActivationBlockBytes = 512 << 10;

// The two kinds of tile product (TileDot below).
struct Bf16Tiles {  // f32 sums of bf16 pairs (TDPBF16PS)
  using Acc = float;
  static constexpr bool kInt8 = false;
};
struct Int8Tiles {  // int32 sums of u8 x s8 quads (TDPBUSD)
  using Acc = int32_t;
  static constexpr bool kInt8 = true;
};

// Tile c += tile a . tile b for the Kind of the enclosing template. A macro: GCC's tile intrinsics
// paste their tile numbers into the asm text, so they take literals only.
#define LATENT_TILE_DOT(c, a, b)   \
  do {                             \
    if constexpr (Kind::kInt8) {   \
      _tile_dpbusd(c, a, b);       \
    } else {                       \
      _tile_dpbf16ps(c, a, b);     \
    }                              \
  } while (false)

// LDTILECFG's 64-byte operand (palette 1): every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles of k per activation row in the kernels' buffer (x's row stride over 64 bytes): the
// weights' count made odd, with a spare tile that is never read where it is even. A tile row is
// one 64-byte line, so 16 rows an odd number of lines apart fall in 16 different L1 sets, where an
// even count puts them in fewer: at 64 tiles (k 2,048 in bf16) all 16 rows of an activation tile
// sit 4 KiB apart in one set, and each tile load evicts its own rows. The spare tile gained 25%
// at m 512 in bf16 (n 10944, k 2048) and 12-20% in W8A8 at k 2,048 (32 tiles: 2 sets) on a
// 2-core Xeon (docs/performance.md, wave 2 session 28).
inline int64_t TileActivationRowTiles(int64_t tiles) { return tiles | 1; }

// Activation rows the kernels' buffer holds for an m-row call (TileBlocks).
inline int64_t TileActivationRows(int64_t m) {
  return m <= kTileRows ? m : (m + kTileRows - 1) / kTileRows * kTileRows;
}

// n values from `buffer` (the caller's thread_local: sums, a stage), 64-byte aligned as whole
// tile rows for the tile loads and stores and the vector ones over them; grown as needed.
template <class T>
T* Aligned64(std::vector<T>& buffer, int64_t n) {
  constexpr int64_t kPad = 64 / sizeof(T);  // values per 64 bytes
  static_assert(kPad * sizeof(T) == 64);
  if (static_cast<int64_t>(buffer.size()) < n + kPad) buffer.resize(n + kPad);
  const int64_t misplaced = reinterpret_cast<uintptr_t>(buffer.data()) / sizeof(T) % kPad;
  return buffer.data() + (kPad - misplaced) % kPad;
}

// x [m, k] f32 rounded to bf16 (avx512::RoundRowsPadded: nearest even, NaN stays NaN) into this
// thread's buffer as the kernels read it: TileActivationRows(m) rows of
// TileActivationRowTiles(tiles) tiles of 32 values, zero past k and past m.
inline const uint8_t* TileActivationsBf16(const float* x, int64_t m, int64_t k, int64_t tiles) {
  const int64_t rows = TileActivationRows(m);
  const int64_t stride = TileActivationRowTiles(tiles) * kPackK;  // bf16 values per row
  thread_local std::vector<uint16_t> xb;
  if (static_cast<int64_t>(xb.size()) < rows * stride) xb.resize(rows * stride);
  avx512::RoundRowsPadded(x, m, k, stride, xb.data());
  std::memset(xb.data() + m * stride, 0,
              static_cast<size_t>((rows - m) * stride) * sizeof(uint16_t));
  return reinterpret_cast<const uint8_t*>(xb.data());
}

// Tiles: 0-3 accumulators, 4-5 activations (A), 5-7 weights (B; tile 5 is A's when two A tiles
// are in use). `rows`: the rows of the accumulators and of A tile 4 (16, or m for decode: fewer
// rows to load and multiply; row r of an accumulator reads only row r of A, so its arithmetic is
// the same in a tile of any height).
inline void ConfigureTiles(int64_t rows) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = kTileRowBytes;
    c.rows[t] = static_cast<uint8_t>(t <= 4 ? rows : kTileRows);
  }
  _tile_loadconfig(&c);
}

// Decode: the m (<= 16) activation rows against NT (1..4) column blocks from block b, over all of
// k; then finish(sums [m rows of 64], 64, 0, m, b, NT).
template <class Kind, int NT, class Finish>
void TileRow(const PackedCall<uint8_t>& j, int64_t b, Finish& finish) {
  const int64_t lda = TileActivationRowTiles(j.tiles) * kTileRowBytes;
  const uint8_t* w = j.packed + b * j.block_bytes;
  const int64_t bb = j.block_bytes;
  // Prefetches stay inside the view's blocks (a pointer past the copy's end is undefined, even
  // only prefetched): those aimed past its last block are skipped.
  const int64_t end = (j.row0 + j.n + kTileRows - 1) / kTileRows * bb;  // bytes from j.packed
  _tile_zero(0);
  if constexpr (NT > 1) _tile_zero(1);
  if constexpr (NT > 2) _tile_zero(2);
  if constexpr (NT > 3) _tile_zero(3);
  for (int64_t kk = 0; kk < j.tiles; ++kk) {
    const uint8_t* t = w + kk * kTileBytes;
    for (int s = 0; s < NT; ++s) {
      const int64_t ahead = (b + s) * bb + kk * kTileBytes + kPrefetch;
      if (ahead + kTileBytes > end) continue;
      for (int64_t l = 0; l < kTileBytes; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(j.packed + ahead + l), _MM_HINT_T0);
      }
    }
    _tile_loadd(4, j.x + kk * kTileRowBytes, lda);
    _tile_loadd(5, t, kTileRowBytes);
    LATENT_TILE_DOT(0, 4, 5);
    if constexpr (NT > 1) {
      _tile_loadd(6, t + bb, kTileRowBytes);
      LATENT_TILE_DOT(1, 4, 6);
    }
    if constexpr (NT > 2) {
      _tile_loadd(7, t + 2 * bb, kTileRowBytes);
      LATENT_TILE_DOT(2, 4, 7);
    }
    if constexpr (NT > 3) {
      _tile_loadd(5, t + 3 * bb, kTileRowBytes);
      LATENT_TILE_DOT(3, 4, 5);
    }
  }
  constexpr int64_t ld = 4 * kTileRows;  // sums: [16 rows][4 blocks x 16]
  alignas(64) typename Kind::Acc c[kTileRows * ld];
  _tile_stored(0, c, ld * 4);
  if constexpr (NT > 1) _tile_stored(1, c + kTileRows, ld * 4);
  if constexpr (NT > 2) _tile_stored(2, c + 2 * kTileRows, ld * 4);
  if constexpr (NT > 3) _tile_stored(3, c + 3 * kTileRows, ld * 4);
  finish(c, ld, 0, j.m, b, NT);
}

// Batches: accumulators for 16 or 32 activation rows from m0 (MT tiles) x NT (1..2) column
// blocks from block b (column `col` of `acc`, whose row 0 is activation row r0, rows of `cols`
// sums), over k tiles [k0, k1): zeroed for the first k tile, else loaded from `acc`; stored back
// to it.
template <class Kind, int MT, int NT>
void AccumulateTiles(const PackedCall<uint8_t>& j, typename Kind::Acc* acc, int64_t cols,
                     int64_t r0, int64_t m0, int64_t b, int64_t col, int64_t k0, int64_t k1) {
  const int64_t ldc = cols * 4;
  auto* c0 = acc + (m0 - r0) * cols + col;  // tile 0: rows m0.., block b
  auto* c1 = c0 + kTileRows * cols;         // tile 1: rows m0 + 16.., block b
  auto* c2 = c0 + kTileRows;                // tile 2: rows m0.., block b + 1
  auto* c3 = c1 + kTileRows;                // tile 3: rows m0 + 16.., block b + 1
  if (k0 == 0) {
    _tile_zero(0);
    if constexpr (MT > 1) _tile_zero(1);
    if constexpr (NT > 1) _tile_zero(2);
    if constexpr (MT > 1 && NT > 1) _tile_zero(3);
  } else {
    _tile_loadd(0, c0, ldc);
    if constexpr (MT > 1) _tile_loadd(1, c1, ldc);
    if constexpr (NT > 1) _tile_loadd(2, c2, ldc);
    if constexpr (MT > 1 && NT > 1) _tile_loadd(3, c3, ldc);
  }
  const int64_t lda = TileActivationRowTiles(j.tiles) * kTileRowBytes;
  const uint8_t* a = j.x + m0 * lda;
  const uint8_t* a2 = a + kTileRows * lda;
  const uint8_t* w = j.packed + b * j.block_bytes;
  const int64_t bb = j.block_bytes;
  for (int64_t kk = k0; kk < k1; ++kk) {
    const uint8_t* t = w + kk * kTileBytes;
    _tile_loadd(4, a + kk * kTileRowBytes, lda);
    if constexpr (MT > 1) _tile_loadd(5, a2 + kk * kTileRowBytes, lda);
    _tile_loadd(6, t, kTileRowBytes);
    LATENT_TILE_DOT(0, 4, 6);
    if constexpr (MT > 1) LATENT_TILE_DOT(1, 5, 6);
    if constexpr (NT > 1) {
      _tile_loadd(7, t + bb, kTileRowBytes);
      LATENT_TILE_DOT(2, 4, 7);
      if constexpr (MT > 1) LATENT_TILE_DOT(3, 5, 7);
    }
  }
  _tile_stored(0, c0, ldc);
  if constexpr (MT > 1) _tile_stored(1, c1, ldc);
  if constexpr (NT > 1) _tile_stored(2, c2, ldc);
  if constexpr (MT > 1 && NT > 1) _tile_stored(3, c3, ldc);
}

// Batches: column blocks [b0, b1) (at most kGroupBlocks) for activation rows [r0, r1) (whole
// tiles; a row block of TileBlocks), k in chunks of kChunkK tiles: per chunk, each column pair's
// weights (2 x 64 KiB) are read once from memory and reused from L2 by every 32-row tile pair,
// whose activations (4 KiB a row per chunk, at most kActivationBlockBytes in all) stay in L2;
// the sums ([16-row tiles, cols], 1 KiB a row) carry from chunk to chunk; then finish(sums,
// cols, r0, rows of [r0, r1) below m, b0, b1 - b0).
template <class Kind, class Finish>
void BatchBlocks(const PackedCall<uint8_t>& j, int64_t r0, int64_t r1, int64_t b0, int64_t b1,
                 Finish& finish) {
  using Acc = typename Kind::Acc;
  const int64_t cols = (b1 - b0) * kTileRows;
  thread_local std::vector<Acc> buffer;
  Acc* acc = Aligned64(buffer, (r1 - r0) * cols);
  for (int64_t k0 = 0; k0 < j.tiles; k0 += kChunkK) {
    const int64_t k1 = std::min(j.tiles, k0 + kChunkK);
    for (int64_t b = b0; b < b1; b += 2) {
      const int64_t col = (b - b0) * kTileRows;
      const bool two = b + 1 < b1;
      for (int64_t m0 = r0; m0 < r1; m0 += 2 * kTileRows) {
        if (m0 + kTileRows < r1) {
          two ? AccumulateTiles<Kind, 2, 2>(j, acc, cols, r0, m0, b, col, k0, k1)
              : AccumulateTiles<Kind, 2, 1>(j, acc, cols, r0, m0, b, col, k0, k1);
        } else {
          two ? AccumulateTiles<Kind, 1, 2>(j, acc, cols, r0, m0, b, col, k0, k1)
              : AccumulateTiles<Kind, 1, 1>(j, acc, cols, r0, m0, b, col, k0, k1);
        }
      }
    }
  }
  finish(acc, cols, r0, std::min(r1, j.m) - r0, b0, b1 - b0);
}

// Column blocks [b0, b1) (packed block indices) of j for every activation row: j.x holds
// max(m, 16 ceil(m / 16)) rows when m > 16 (whole tiles), m rows otherwise, each of
// TileActivationRowTiles(j.tiles) tiles.
// finish(sums, ld, m0, rows, b, blocks) writes the outputs of activation rows [m0, m0 + rows) for
// column blocks [b, b + blocks) from their sums (rows of ld, column 0 = packed row 16 b).
template <class Kind, class Finish>
void TileBlocks(const PackedCall<uint8_t>& j, int64_t b0, int64_t b1, Finish&& finish) {
  if (j.m <= kTileRows) {  // decode: one activation tile of m rows, 4 weight streams at a time
    ConfigureTiles(j.m);
    int64_t b = b0;
    for (; b + 4 <= b1; b += 4) TileRow<Kind, 4>(j, b, finish);
    switch (b1 - b) {
      case 3: TileRow<Kind, 3>(j, b, finish); break;
      case 2: TileRow<Kind, 2>(j, b, finish); break;
      case 1: TileRow<Kind, 1>(j, b, finish); break;
      default: break;
    }
  } else {
    ConfigureTiles(kTileRows);
    const int64_t rows = TileActivationRows(j.m);
    constexpr int64_t kPair = 2 * kTileRows;  // row blocks hold whole tile pairs
    const int64_t chunk_bytes = std::min(j.tiles, kChunkK) * kTileRowBytes;  // per row
    const int64_t row_block = std::max(kPair, kActivationBlockBytes / chunk_bytes / kPair * kPair);
    for (int64_t g = b0; g < b1; g += kGroupBlocks) {  // a group's weights come from memory once
      const int64_t g1 = std::min(b1, g + kGroupBlocks);
      for (int64_t r0 = 0; r0 < rows; r0 += row_block) {
        BatchBlocks<Kind>(j, r0, std::min(rows, r0 + row_block), g, g1, finish);
      }
    }
  }
  _tile_release();
}

}  // namespace
}  // namespace latent::kernels::amx

#undef LATENT_TILE_DOT
