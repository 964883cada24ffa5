// Plain C++ (no target pragma): both the AMX and the AVX-512 table pack with it, on any CPU.
#include "kernels/tile_pack.h"

#include <algorithm>
#include <cstring>

#include "tensor/dtype.h"
#include "threads/thread_pool.h"

namespace latent::kernels {

int64_t TilePackedBytes(const WeightRef& w) {
  if (w.dtype != DType::kBF16 || !w.bf16_activations || w.n <= 0 || w.k <= 0) return 0;
  return (w.n + kPackRows - 1) / kPackRows * ((w.k + kPackK - 1) / kPackK) * kPackTileBytes;
}

void TilePack(const WeightRef& w, void* out) {
  const int64_t tiles = (w.k + kPackK - 1) / kPackK;
  const int64_t blocks = (w.n + kPackRows - 1) / kPackRows;
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t row_bytes = 2 * w.k;
  const int64_t whole_tiles = w.k / kPackK;  // tiles with no k past the end
  threads::ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      uint8_t* block = dst + b * tiles * kPackTileBytes;
      const int64_t rows = std::min<int64_t>(kPackRows, w.n - b * kPackRows);
      const uint8_t* row[kPackRows];  // [16]: the block's rows (past n: none)
      for (int64_t j = 0; j < rows; ++j) row[j] = src + (b * kPackRows + j) * row_bytes;
      // Whole tiles of a whole block: each 64-byte line (one k-pair of the 16 rows) written in
      // order, its 16 pairs read one from each row.
      const int64_t fast_tiles = rows == kPackRows ? whole_tiles : 0;
      for (int64_t t = 0; t < fast_tiles; ++t) {
        uint8_t* tile = block + t * kPackTileBytes;
        for (int64_t p = 0; p < kPackK / 2; ++p) {
          const int64_t at = (t * kPackK + 2 * p) * 2;  // the pair's byte offset in a row
          uint8_t* line = tile + p * kPackRows * 4;
          for (int64_t j = 0; j < kPackRows; ++j) std::memcpy(line + j * 4, row[j] + at, 4);
        }
      }
      // The rest (a tile holding the end of k, or a block holding the end of n): zeros past n and
      // k, pair by pair.
      if (fast_tiles == tiles) continue;
      std::memset(block + fast_tiles * kPackTileBytes, 0,
                  static_cast<size_t>((tiles - fast_tiles) * kPackTileBytes));
      for (int64_t j = 0; j < rows; ++j) {
        for (int64_t c = fast_tiles * kPackK; c < w.k; c += 2) {  // the last pair may be half
          const int64_t t = c / kPackK, p = (c % kPackK) / 2;
          std::memcpy(block + t * kPackTileBytes + (p * kPackRows + j) * 4, row[j] + 2 * c,
                      c + 1 < w.k ? 4 : 2);
        }
      }
    }
  });
}

bool ReadsTilePacked(const WeightRef& w) {
  return w.packed != nullptr && w.dtype == DType::kBF16 && w.bf16_activations;
}

void ForEachPackedBlockRange(const WeightRef& w, int64_t m, threads::RangeFn blocks) {
  const int64_t first = w.packed_row0 / kPackRows;
  const int64_t count = (w.packed_row0 + w.n + kPackRows - 1) / kPackRows - first;
  const int64_t block_bytes = (w.k + kPackK - 1) / kPackK * kPackTileBytes;
  const auto run = [&blocks, first](int64_t b0, int64_t b1) { blocks(first + b0, first + b1); };
  const int64_t threads = threads::NumThreads();
  int64_t grain = std::max<int64_t>(4, (int64_t{128} << 10) / block_bytes);
  grain = std::min(grain, (count + 4 * threads - 1) / (4 * threads));
  grain = std::max<int64_t>(4, (grain + 3) / 4 * 4);
  const double work = static_cast<double>(w.n) * static_cast<double>(w.k) * static_cast<double>(m);
  if (threads == 1 || work < 65536.0 || grain >= count) {
    run(0, count);
    return;
  }
  threads::ParallelFor(count, grain, run);
}

}  // namespace latent::kernels
