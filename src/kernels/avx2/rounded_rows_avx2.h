// Activation rows for the AVX2 kernels over tile-packed weights (avx2/linear_bf16_packed_avx2.cc,
// linear_fp8_packed_avx2.cc): rounded to bf16 and kept as f32, row by row or in the row tiles of
// the staged register tile (staged_tile_avx2.h). Plain C++ (the rounding itself is
// RoundActivationsToBf16's AVX2 code): include it outside the target region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/avx2/avx2_kernels.h"
#include "kernels/tile_pack.h"
#include "threads/thread_pool.h"

namespace latent::kernels::avx2 {

// x [m, k] rounded to bf16 (kept as f32) into this thread's buffer [m, kp], zero past k: the
// packed weights are zero there too, and 0 * 0 keeps the sums as they are. Valid until the
// thread's next call.
inline const float* RoundedRowsF32(const float* x, int64_t m, int64_t k, int64_t kp) {
  thread_local std::vector<float> rows;
  if (static_cast<int64_t>(rows.size()) < m * kp) rows.resize(m * kp);
  float* out = rows.data();
  threads::ParallelRows(m, kp, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RoundActivationsToBf16(x + r * k, k, out + r * kp);
      std::fill(out + r * kp + k, out + (r + 1) * kp, 0.0f);
    }
  });
  return out;
}

// Activation rows per register tile of the staged kernels: 12 accumulators, two stage vectors and
// a broadcast in 16 ymm registers.
inline constexpr int kStagedRows = 6;

// m activation rows cut into ceil(m / 6) register tiles of near-equal height, taller first (64
// rows: 9 of 6 and 2 of 5; 7 rows: 4 + 3): a short last tile of 1-2 rows would run 2-4
// accumulator chains, a quarter to half of the FMA rate.
struct RowTiles {
  int64_t m, count;
  explicit RowTiles(int64_t rows) : m(rows), count((rows + kStagedRows - 1) / kStagedRows) {}
  int64_t Start(int64_t i) const { return i * (m / count) + std::min(i, m % count); }  // i <= count
  int64_t Height(int64_t i) const { return m / count + (i < m % count ? 1 : 0); }
};

// The staged kernels' row blocks: whole register tiles, at most PackedRowBlock rows (4 MiB of
// activations) each, and this thread's accumulator buffer for one block ([its rows, 16] f32,
// valid until the thread's next call).
struct StagedRowBlocks {
  int64_t block_tiles;  // register tiles per row block
  float* acc;
};
inline StagedRowBlocks MakeStagedRowBlocks(int64_t m, int64_t kp) {
  thread_local std::vector<float> buffer;
  const int64_t block_tiles = PackedRowBlock(kp, sizeof(float)) / kStagedRows;
  const int64_t rows = std::min(m, block_tiles * kStagedRows);
  if (static_cast<int64_t>(buffer.size()) < rows * kPackRows) buffer.resize(rows * kPackRows);
  return {block_tiles, buffer.data()};
}

// x [m, k] rounded to bf16 (kept as f32) into this thread's buffer in row tiles: tile i (rows
// Start(i) .. + Height(i)) at Start(i) * kp, [kp][Height(i)], zero past k. One sequential stream
// per register tile: read row by row, its 6 rows were 6 streams that the L1 prefetcher did not
// keep up with (a 512-row batch 82 -> 90 GFLOP/s on one Zen 3 core). Valid until the thread's
// next call.
inline const float* RoundedTilesF32(const float* x, int64_t m, int64_t k, int64_t kp) {
  thread_local std::vector<float> tiled;
  if (static_cast<int64_t>(tiled.size()) < m * kp) tiled.resize(m * kp);
  float* out = tiled.data();
  const RowTiles tiles(m);
  threads::ParallelRows(tiles.count, kStagedRows * kp, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> row;  // [k] one rounded row
    if (static_cast<int64_t>(row.size()) < k) row.resize(k);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t m0 = tiles.Start(i), height = tiles.Height(i);
      float* tile = out + m0 * kp;  // [kp][height]
      for (int64_t r = 0; r < height; ++r) {
        RoundActivationsToBf16(x + (m0 + r) * k, k, row.data());
        for (int64_t c = 0; c < k; ++c) tile[c * height + r] = row[c];
      }
      std::fill(tile + k * height, tile + kp * height, 0.0f);
    }
  });
  return out;
}

// Batches of at least this many rows get their activations in row tiles (and, in the bf16
// kernel, the staged tile): below it the one-row layout measured as fast or faster.
inline constexpr int64_t kRowTilesMinRows = 24;

// The rounded activations in the layout the packed kernels read for m rows: row tiles for
// kRowTilesMinRows rows or more, else rows.
inline const float* RoundedActivationsF32(const float* x, int64_t m, int64_t k, int64_t kp) {
  return m < kRowTilesMinRows ? RoundedRowsF32(x, m, k, kp) : RoundedTilesF32(x, m, k, kp);
}

}  // namespace latent::kernels::avx2
