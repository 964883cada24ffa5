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

namespace {

// The fp8 layout's order inside each 64 bytes (two lines of 32 codes): byte 16 L + i holds line
// 0's code 8 L + i and byte 16 L + 8 + i line 1's (L < 4, i < 8), what the kernel's per-128-bit-
// lane vpunpck{l,h}bw put back in line order.
void InterleaveLinePairs(uint8_t* bytes, int64_t size) {
  uint8_t lines[64];
  for (int64_t at = 0; at < size; at += 64) {
    std::memcpy(lines, bytes + at, 64);
    for (int64_t lane = 0; lane < 4; ++lane) {
      for (int64_t i = 0; i < 8; ++i) {
        bytes[at + 16 * lane + i] = lines[8 * lane + i];
        bytes[at + 16 * lane + 8 + i] = lines[32 + 8 * lane + i];
      }
    }
  }
}

// Writes w's rows (elements of kElem bytes) in the tile layout of tile_pack.h: pairs of kElem-byte
// elements, 16 rows to a line, 16 lines to a tile.
template <int64_t kElem>
void PackTiles(const WeightRef& w, void* out) {
  constexpr int64_t kPair = 2 * kElem, kLine = kPackRows * kPair, kTile = kPackK / 2 * kLine;
  const int64_t tiles = (w.k + kPackK - 1) / kPackK;
  const int64_t blocks = (w.n + kPackRows - 1) / kPackRows;
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t row_bytes = kElem * w.k;
  const int64_t whole_tiles = w.k / kPackK;  // tiles with no k past the end
  threads::ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      uint8_t* block = dst + b * tiles * kTile;
      const int64_t rows = std::min<int64_t>(kPackRows, w.n - b * kPackRows);
      const uint8_t* row[kPackRows];  // [16]: the block's rows (past n: none)
      for (int64_t j = 0; j < rows; ++j) row[j] = src + (b * kPackRows + j) * row_bytes;
      // Whole tiles of a whole block: each line (one k-pair of the 16 rows) written in order, its
      // 16 pairs read one from each row.
      const int64_t fast_tiles = rows == kPackRows ? whole_tiles : 0;
      for (int64_t t = 0; t < fast_tiles; ++t) {
        uint8_t* tile = block + t * kTile;
        for (int64_t p = 0; p < kPackK / 2; ++p) {
          const int64_t at = (t * kPackK + 2 * p) * kElem;  // the pair's byte offset in a row
          uint8_t* line = tile + p * kLine;
          for (int64_t j = 0; j < kPackRows; ++j) std::memcpy(line + j * kPair, row[j] + at, kPair);
        }
      }
      // The rest (a tile holding the end of k, or a block holding the end of n): zeros past n and
      // k, pair by pair.
      if (fast_tiles < tiles) {
        std::memset(block + fast_tiles * kTile, 0,
                    static_cast<size_t>((tiles - fast_tiles) * kTile));
        for (int64_t j = 0; j < rows; ++j) {
          for (int64_t c = fast_tiles * kPackK; c < w.k; c += 2) {  // the last pair may be half
            const int64_t t = c / kPackK, p = (c % kPackK) / 2;
            std::memcpy(block + t * kTile + p * kLine + j * kPair, row[j] + kElem * c,
                        c + 1 < w.k ? kPair : kElem);
          }
        }
      }
      if constexpr (kElem == 1) InterleaveLinePairs(block, tiles * kTile);
    }
  });
}

}  // namespace

void TilePack(const WeightRef& w, void* out) { PackTiles<2>(w, out); }

bool Fp8PacksFit(const WeightRef& w) {
  if (w.dtype != DType::kF8E4M3 || !w.bf16_activations || w.n <= 0 || w.k <= 0) return false;
  // A scale block must hold whole pairs of lines (the vdpbf16ps kernel widens two k-pairs at a
  // time and applies scales between them; the AVX2 kernel's segments are whole k-pairs).
  return w.scale == nullptr || (w.block_n > 0 && w.block_k > 0 && w.block_k % 4 == 0);
}

int64_t Fp8TilePackedBytes(const WeightRef& w) {
  if (!Fp8PacksFit(w)) return 0;
  return (w.n + kPackRows - 1) / kPackRows * ((w.k + kPackK - 1) / kPackK) * kPackFp8TileBytes;
}

void Fp8TilePack(const WeightRef& w, void* out) { PackTiles<1>(w, out); }

bool ReadsTilePacked(const WeightRef& w) {
  return w.dtype == DType::kBF16 && w.bf16_activations && w.ReadsPacked(PackedLayout::kBf16Tiles);
}

void ForEachPackedBlockRange(const WeightRef& w, int64_t m, threads::RangeFn blocks) {
  const int64_t first = w.packed_row0 / kPackRows;
  const int64_t count = (w.packed_row0 + w.n + kPackRows - 1) / kPackRows - first;
  // Only sizes the grain: the AVX2 fp8 layout's 32-byte block header is left out.
  const int64_t block_bytes =
      w.dtype == DType::kI8 ? (w.k + kW8A8PackK - 1) / kW8A8PackK * kPackTileBytes
                            : (w.k + kPackK - 1) / kPackK * kPackTileBytes /
                                  (w.dtype == DType::kF8E4M3 ? 2 : 1);
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
