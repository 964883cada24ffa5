// Linear over bf16 weights under bf16 compute (WeightRef::bf16_activations) on AVX2 FMAs over the
// tile-packed copy of the weights (kernels/tile_pack.h): the default bf16 kernel of CPUs with AVX2
// and no AVX-512 (AMD Zen 1-3, Intel client parts), which have no bf16 dot instruction.
//
// In the packed layout one k-pair of a block's 16 weight rows is one 64-byte line: two ymm of 8
// rows, each 32-bit lane one row's (k, k + 1) pair. A shift left by 16 turns a lane into the f32 of
// its k value, a mask of the high half into that of its k + 1 value, so
//
//   acc[r][h] (8 outputs of activation row r) = fma(x[r][k + 1], odd(line h),
//                                                 fma(x[r][k], even(line h), acc[r][h]))
//
// is one f32 chain over k in order from zero for every output, whatever M, the register tile, the
// thread split or the path below (an f32 store and reload between k chunks changes nothing): batch
// invariant, as the other kernels are. Its order differs from the row-major AVX2 kernel's (8
// lanes per row, reduced at the end; linear_avx2.cc), which keeps the weights that are not packed.
// The activations are the bf16-rounded inputs kept as f32, so every product is exact in f32 and
// only the order of the sums sets the bits.
//
// Blocking (16 ymm registers). Decode (m <= 4): one register tile over all of k per group of
// column blocks, the accumulators in registers, one weight stream per block: 4 blocks at m = 1, 2
// at m = 2, 1 at m = 3-4 (6-8 accumulators, two dependent FMAs per k-pair). Small batches (m <
// 24): for each pair of column blocks, k in chunks of 8 tiles (2 x 8 KiB of weights, which stay in
// L1 while every 4-row activation tile goes past them; the last 1-2 rows take both blocks at
// once), the accumulators in an f32 buffer [rows, 32] (stack) between chunks. Large batches: one
// column block at a time, each chunk's weights widened once into an f32 stage [256 k][16] (16 KiB,
// L1) that every register tile of 5-6 rows reads (staged_tile_avx2.h), the activations in row
// tiles (RoundedTilesF32), the accumulators in an f32 buffer [rows, 16], the rows in blocks of
// 4 MiB of activations (at least 10 tiles), which stay in the last-level cache while every column
// block goes past them. Threads split N into groups of whole column blocks.
//
// Why two batch paths (bench/kernels, n 16384 x k 2048, 2 threads on a 2-core Zen 3, GFLOP/s,
// widening in the tile -> stage): m = 6 134 -> 80-95, m = 16 156 -> 147-153, m = 24 164 -> 165,
// m = 64 166 -> 172-175, m = 128 162 -> 180, m = 512 164 -> 172-174. The stage pays for itself
// once enough row tiles read it; a few rows hide the weights' memory latency better while
// widening as they read.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx2/rounded_rows_avx2.h"
#include "kernels/kernel_table.h"
#include "kernels/tile_pack.h"
#include "threads/thread_pool.h"
// Last: defines the AVX2 helpers under the target pragma.
#include "kernels/avx2/avx2_common.h"
#include "kernels/avx2/staged_tile_avx2.h"

LATENT_AVX2_BEGIN
namespace latent::kernels::avx2 {
namespace {

constexpr int kMaxRows = 4;             // decode and small batches: rows per register tile
constexpr int64_t kChunkTiles = 8;      // batches: k tiles (of 32) per pass over the accumulators
constexpr int kBatchBlocks = 2;         // small batches: column blocks per group
constexpr int64_t kChunkPairs = kChunkTiles * kPackK / 2;  // k-pairs per chunk
constexpr int kHalf = 8;                // outputs per ymm: half a block
constexpr int64_t kLine = 64;           // bytes of one k-pair of a block (16 rows x 2 bf16)
// One-block tiles (3-4-row decode, the decode's leftover blocks, every small-batch tile) prefetch
// their weight stream this far ahead; the 1-2-row decode tiles over 2-4 blocks read that many
// streams at once, which the hardware prefetcher keeps up with (a software prefetch there
// measured no gain). In a small batch the first 4-row tile of a chunk brings its lines in; the
// later ones find them in L1, and the chunk's last tiles ask for the next chunk. (Large batches
// ask for the next chunk's lines from every staged tile, a share each.)
constexpr int64_t kPrefetchBytes = 4096;

// Asks for the line `ahead` bytes past p. The address is formed as an integer: past the packed
// copy's end it points outside the allocation, where a prefetch does nothing (it never faults).
inline void PrefetchAhead(const uint8_t* p, int64_t ahead) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + ahead),
               _MM_HINT_T0);
}

using PackedJob = PackedCall<float>;

// Half a packed line (8 rows' (k, k + 1) pairs) and the f32 values of its k and k + 1 halves.
inline __m256i Line(const uint8_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m256 Even(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
inline __m256 Odd(__m256i v, __m256i high) {
  return _mm256_castsi256_ps(_mm256_and_si256(v, high));
}

// MR activation rows from m0 x NB column blocks from b, over k tiles [t0, t1). acc: [MR rows of
// ld floats], column 16 s for block b + s; zeroed first when t0 == 0, else loaded, then stored.
template <int MR, int NB>
void Tile(const PackedJob& j, int64_t m0, int64_t b, int64_t t0, int64_t t1, float* acc,
          int64_t ld) {
  __m256 c[MR][2 * NB];  // [row][half block]
  for (int r = 0; r < MR; ++r) {
    for (int h = 0; h < 2 * NB; ++h) {
      c[r][h] = t0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + r * ld + h * kHalf);
    }
  }
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const uint8_t* w[NB];
  for (int s = 0; s < NB; ++s) w[s] = j.packed + (b + s) * j.block_bytes;
  const float* x = j.x + m0 * j.kp;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t at = t * kPackTileBytes;
    const float* xt = x + t * kPackK;
    for (int64_t p = 0; p < kPackRows; ++p) {
      const int64_t line = at + p * kLine;  // this k-pair's line in each block
      if constexpr (NB == 1) {
        // One weight stream at 64 bytes per 8-16 FMAs, faster than the hardware prefetcher
        // brings it from memory on Zen 3 (3-4-row decode 50 -> 66-71 GFLOP/s on one core,
        // 6-row batches 75-83 -> 98-107 on two).
        PrefetchAhead(w[0] + line, kPrefetchBytes);
        // Up to 4 rows of one block: the line's 4 vectors first, then each row's two broadcasts
        // against them (8 accumulators + 4 + 2 live, none spilled).
        __m256 even[2], odd[2];
        for (int h = 0; h < 2; ++h) {
          const __m256i v = Line(w[0] + line + h * 32);
          even[h] = Even(v);
          odd[h] = Odd(v, high);
        }
        for (int r = 0; r < MR; ++r) {
          const float* xr = xt + r * j.kp + 2 * p;
          const __m256 x0 = InRegister(_mm256_broadcast_ss(xr));
          const __m256 x1 = InRegister(_mm256_broadcast_ss(xr + 1));
          for (int h = 0; h < 2; ++h) {
            c[r][h] = _mm256_fmadd_ps(x0, even[h], c[r][h]);
            c[r][h] = _mm256_fmadd_ps(x1, odd[h], c[r][h]);
          }
        }
      } else {
        // 1-2 rows of 2-4 blocks: the rows' broadcasts first (at most 4), then one half block
        // at a time.
        __m256 x0[MR], x1[MR];
        for (int r = 0; r < MR; ++r) {
          x0[r] = _mm256_broadcast_ss(xt + r * j.kp + 2 * p);
          x1[r] = _mm256_broadcast_ss(xt + r * j.kp + 2 * p + 1);
        }
        for (int h = 0; h < 2 * NB; ++h) {
          const __m256i v = Line(w[h / 2] + line + (h % 2) * 32);
          const __m256 even = Even(v), odd = Odd(v, high);
          for (int r = 0; r < MR; ++r) {
            c[r][h] = _mm256_fmadd_ps(x0[r], even, c[r][h]);
            c[r][h] = _mm256_fmadd_ps(x1[r], odd, c[r][h]);
          }
        }
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int h = 0; h < 2 * NB; ++h) _mm256_storeu_ps(acc + r * ld + h * kHalf, c[r][h]);
  }
}

// Decode: all MR = m rows over all of k, NB blocks at a time (8 accumulators), the rest of the
// range one block at a time.
template <int MR>
void BlocksDecode(const PackedJob& j, int64_t b0, int64_t b1) {
  constexpr int kNb = MR == 1 ? 4 : MR == 2 ? 2 : 1;
  alignas(32) float acc[MR * kNb * kPackRows];
  constexpr int64_t ld = kNb * kPackRows;
  int64_t b = b0;
  for (; b + kNb <= b1; b += kNb) {
    Tile<MR, kNb>(j, 0, b, 0, j.tiles, acc, ld);
    CopyPackedOut(j, acc, ld, 0, MR, b, kNb);
  }
  for (; b < b1; ++b) {
    Tile<MR, 1>(j, 0, b, 0, j.tiles, acc, ld);
    CopyPackedOut(j, acc, ld, 0, MR, b, 1);
  }
}

// Small batches (5 to kRowTilesMinRows - 1 rows, one row block): column blocks [b0, b1) for every
// activation row.
void BlocksSmallBatch(const PackedJob& j, int64_t b0, int64_t b1) {
  constexpr int64_t ld = kBatchBlocks * kPackRows;
  alignas(32) float acc[kRowTilesMinRows * ld];
  for (int64_t b = b0; b < b1; b += kBatchBlocks) {
    const int64_t blocks = std::min<int64_t>(kBatchBlocks, b1 - b);
    for (int64_t t0 = 0; t0 < j.tiles; t0 += kChunkTiles) {
      const int64_t t1 = std::min(j.tiles, t0 + kChunkTiles);
      for (int64_t m0 = 0; m0 < j.m; m0 += kMaxRows) {
        float* row_acc = acc + m0 * ld;
        if (j.m - m0 <= 2 && blocks == kBatchBlocks) {
          // The last 1-2 rows over both blocks at once: 4-8 accumulators instead of 2-4, the
          // lines already in L1 from the 4-row tiles before them.
          WithRowCount<2>(j.m - m0, [&]<int MR>() {
            Tile<MR, kBatchBlocks>(j, m0, b, t0, t1, row_acc, ld);
          });
          continue;
        }
        for (int64_t s = 0; s < blocks; ++s) {
          WithRowCount<kMaxRows>(j.m - m0, [&]<int MR>() {
            Tile<MR, 1>(j, m0, b + s, t0, t1, row_acc + s * kPackRows, ld);
          });
        }
      }
    }
    CopyPackedOut(j, acc, ld, 0, j.m, b, blocks);
  }
}

// Large batches: widens k-pairs [p0, p0 + pairs) of column block b into stage [2 pairs][16] (k,
// 16 rows: staged_tile_avx2.h). Its lines were asked for while the previous chunk's tiles ran.
void StageChunk(const PackedJob& j, int64_t b, int64_t p0, int64_t pairs, float* stage) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const uint8_t* line = j.packed + b * j.block_bytes + p0 * kLine;
  for (int64_t p = 0; p < pairs; ++p, line += kLine) {
    for (int h = 0; h < 2; ++h) {
      const __m256i v = Line(line + h * 32);
      _mm256_store_ps(stage + 2 * p * kPackRows + kHalf * h, Even(v));
      _mm256_store_ps(stage + (2 * p + 1) * kPackRows + kHalf * h, Odd(v, high));
    }
  }
}

// Large batches: the MR-row tile at m0 (RoundedTilesF32's layout) over the staged pairs [p0,
// p0 + pairs), continuing the chains in acc [MR rows of 16 floats] (from zero when p0 == 0).
template <int MR>
void StagedTile(const PackedJob& j, int64_t m0, const float* stage, int64_t p0, int64_t pairs,
                float* acc) {
  __m256 c[MR][2];
  for (int r = 0; r < MR; ++r) {
    for (int h = 0; h < 2; ++h) {
      c[r][h] = p0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + r * kPackRows + h * kHalf);
    }
  }
  StagedKs<MR, XLayout::kRowTiles>(j.x + m0 * j.kp + 2 * p0 * MR, 0, stage, 2 * pairs, c);
  for (int r = 0; r < MR; ++r) {
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(acc + r * kPackRows + h * kHalf, c[r][h]);
  }
}

// Large batches: column blocks [b0, b1) for every activation row, x in row tiles.
void BlocksLargeBatch(const PackedJob& j, int64_t b0, int64_t b1) {
  alignas(32) float stage[2 * kChunkPairs * kPackRows];  // 16 KiB
  const RowTiles tiles(j.m);
  const StagedRowBlocks row_blocks = MakeStagedRowBlocks(j.m, j.kp);
  const int64_t block_tiles = row_blocks.block_tiles;
  float* acc = row_blocks.acc;  // [rows of a row block, 16]
  const int64_t k_pairs = j.kp / 2;
  for (int64_t i0 = 0; i0 < tiles.count; i0 += block_tiles) {
    const int64_t i1 = std::min(tiles.count, i0 + block_tiles);
    const int64_t r0 = tiles.Start(i0), r1 = tiles.Start(i1);
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t p0 = 0; p0 < k_pairs; p0 += kChunkPairs) {
        const int64_t pairs = std::min(kChunkPairs, k_pairs - p0);
        StageChunk(j, b, p0, pairs, stage);
        // Each tile asks for its share of the next chunk's lines (past the block's end, the
        // next block's: blocks lie back to back), so that they arrive while the FMAs run.
        // Offsets from the block's start: the pointer itself never leaves the packed copy.
        const uint8_t* block = j.packed + b * j.block_bytes;
        int64_t next = (p0 + pairs) * kLine;
        const int64_t share = (kChunkPairs + (i1 - i0) - 1) / (i1 - i0) * kLine;
        for (int64_t i = i0; i < i1; ++i, next += share) {
          for (int64_t at = 0; at < share; at += kLine) PrefetchAhead(block, next + at);
          const int64_t m0 = tiles.Start(i);
          WithRowCount<kStagedRows>(tiles.Height(i), [&]<int MR>() {
            StagedTile<MR>(j, m0, stage, p0, pairs, acc + (m0 - r0) * kPackRows);
          });
        }
      }
      CopyPackedOut(j, acc, kPackRows, r0, r1 - r0, b, 1);
    }
  }
}

// Column blocks [b0, b1) for every activation row.
void Blocks(const PackedJob& j, int64_t b0, int64_t b1) {
  if (j.m <= kMaxRows) {
    WithRowCount<kMaxRows>(j.m, [&]<int MR>() { BlocksDecode<MR>(j, b0, b1); });
  } else if (j.m < kRowTilesMinRows) {
    BlocksSmallBatch(j, b0, b1);
  } else {
    BlocksLargeBatch(j, b0, b1);
  }
}

// y[m, n] = bf16(x)[m, k] . W[n, k]^T from w's packed copy.
void LinearPacked(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  PackedJob j = MakePackedCall<float>(w, m, y);
  j.x = RoundedActivationsF32(x, m, w.k, j.kp);
  ForEachPackedBlockRange(w, m, [&j](int64_t b0, int64_t b1) { Blocks(j, b0, b1); });
}

}  // namespace

void FillBf16PackedLinear(KernelTable& t) {
  UseTilePackedLinear<LinearPacked, TilePackAvx2>(t);
}

}  // namespace latent::kernels::avx2
LATENT_AVX2_END
