// The blocking of the AVX-512 kernels that stream tile-packed weights in column blocks of 16 rows
// (linear_bf16_packed.cc on vdpbf16ps, linear_w8a8_vnni_packed.cc on vpdpbusd): register tiles of
// up to 6 activation rows x 4 column blocks (24 accumulators, one weight line per block and one
// broadcast per row per step of k). Decode (m <= 6): one tile over all of k per group of 4
// blocks, the sums in registers, 4 weight streams in order. Batches: for each group, k in chunks
// of 64 tiles (4 x 64 KiB of weights, which stay in L2 while every activation tile goes past them),
// the sums in a buffer [m, 64] (L2) between chunks. The order of each output's sum over k is the
// same in both: the kernels stay batch invariant. Include only inside a target region, after
// avx512_common.h (WithRowCount), with kernels/tile_pack.h, <algorithm>, <cstdint> and <vector>
// included before the region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace latent::kernels::avx512 {
// Internal linkage, as in bf16_rows.h: its includers differ in their targets.
namespace {

inline constexpr int kPackedTileRows = 6;     // activation rows per register tile
inline constexpr int kPackedTileBlocks = 4;   // column blocks (16 outputs each) per register tile
// Batches: k tiles per pass over the sums. 64 rather than the 8 that fit L1: each register tile
// then reads 64 KiB runs of each weight stream (long runs for the hardware prefetchers, a likely
// reason) and the sums go through the buffer 8x less often. On Zen 4 (wave 2 session 27) 64 beat
// 8 at every batch shape timed, bf16 by 3-10% (lm_head at m = 64: 402-424 against 382-393
// GFLOP/s) and W8A8 by 5-15%; 4 and 16 were slower, 128 no faster (docs/performance.md).
inline constexpr int64_t kPackedChunkTiles = 64;
inline constexpr int64_t kPackedGroupCols = kPackedTileBlocks * kPackRows;  // outputs per group

// tile.template operator()<MR, NB>() with rows (1 .. 6) and blocks (1 .. 4) as template arguments.
template <class F>
void WithTileShape(int64_t rows, int64_t blocks, F&& tile) {
  const auto with_rows = [&]<int NB>() {
    WithRowCount<kPackedTileRows>(rows, [&]<int MR>() { tile.template operator()<MR, NB>(); });
  };
  switch (blocks) {
    case 4: with_rows.template operator()<4>(); break;
    case 3: with_rows.template operator()<3>(); break;
    case 2: with_rows.template operator()<2>(); break;
    default: with_rows.template operator()<1>(); break;
  }
}

// Column blocks [b0, b1) of an m-row product over `tiles` k tiles, with sums of type Acc:
// tile(m0, rows, b, blocks, t0, t1, acc, ld) runs one register tile over k tiles [t0, t1) into
// acc (rows of ld sums; zeroed first when t0 == 0, else added to), and finish(acc, ld, b, blocks)
// writes the outputs of every row for a group's blocks from their sums.
template <class Acc, class Tile, class Finish>
void PackedBlocks(int64_t m, int64_t tiles, int64_t b0, int64_t b1, Tile&& tile, Finish&& finish) {
  if (m <= kPackedTileRows) {
    alignas(64) Acc acc[kPackedTileRows * kPackedGroupCols];
    for (int64_t b = b0; b < b1; b += kPackedTileBlocks) {
      const int64_t blocks = std::min<int64_t>(kPackedTileBlocks, b1 - b);
      tile(0, m, b, blocks, 0, tiles, acc, kPackedGroupCols);
      finish(acc, kPackedGroupCols, b, blocks);
    }
    return;
  }
  thread_local std::vector<Acc> buffer;
  if (static_cast<int64_t>(buffer.size()) < m * kPackedGroupCols) {
    buffer.resize(m * kPackedGroupCols);
  }
  Acc* acc = buffer.data();
  for (int64_t b = b0; b < b1; b += kPackedTileBlocks) {
    const int64_t blocks = std::min<int64_t>(kPackedTileBlocks, b1 - b);
    for (int64_t t0 = 0; t0 < tiles; t0 += kPackedChunkTiles) {
      const int64_t t1 = std::min(tiles, t0 + kPackedChunkTiles);
      for (int64_t m0 = 0; m0 < m; m0 += kPackedTileRows) {
        const int64_t rows = std::min<int64_t>(kPackedTileRows, m - m0);
        tile(m0, rows, b, blocks, t0, t1, acc + m0 * kPackedGroupCols, kPackedGroupCols);
      }
    }
    finish(acc, kPackedGroupCols, b, blocks);
  }
}

}  // namespace
}  // namespace latent::kernels::avx512
