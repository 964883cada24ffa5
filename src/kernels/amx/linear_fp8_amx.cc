// Linear over fp8 e4m3 weights with block scales (DeepSeek V3's and Kimi K2's checkpoints) under
// bf16 compute on AMX's TDPBF16PS, over the fp8 tile layout the AVX-512 tables already pack
// (kernels/tile_pack.h, one byte per weight). A 512-byte tile of codes widens exactly to the
// 1 KiB bf16 tile TDPBF16PS reads as B (avx512/fp8_widen.h), so this is the vdpbf16ps fp8
// kernel's formula (avx512/linear_fp8_packed.cc) with tile products, in another fixed order:
//
//   y[m, r] = sum over segments g of s(r, g) * (sum over tiles t in g of bf16(x)[m, t] . w[r, t])
//
// A segment is at most 4 tiles (64 k-pairs) inside one scale block: whole tiles only, so this
// kernel takes the fp8 weights whose scale blocks hold whole tiles (block_k % 32 == 0, as
// DeepSeek's 128, or no scales) and leaves the others to the vdpbf16ps kernel. The choice is per
// weight, so a row's output still does not depend on its batch. Each segment's sum is one
// accumulator tile from zero, then acc = fma(sum, scale, acc) per row in segment order: the same
// operations for every M (decode tiles of m rows, batches in whole 16-row tiles), for every
// position in a tile and every thread split.
//
// Blocking: per pair of column blocks, the codes widen once into a bf16 stage that every pair of
// 16-row activation tiles then reads (2 x 2 accumulators): one segment at a time for decode and
// batches of up to 64 rows (2 blocks x 4 tiles x 1 KiB, L1), runs of segments over 64 tiles for
// larger batches (128 KiB, L2), read by blocks of rows whose activations stay in L2 (at 2,048
// rows: 670-690 against 570-580 GFLOP/s one segment at a time, 2048 x 10944). The f32 sums
// [rows, 32] carry from segment to segment.
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "kernels/amx/amx_kernels.h"
#include "kernels/amx/amx_target.h"
#include "kernels/kernel_table.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

namespace latent::kernels::amx {

// Plain C++, outside the target region: `latent info` asks it on any CPU.
bool AmxTakesFp8(const WeightRef& w) {
  return Fp8PacksFit(w) && (w.scale == nullptr || w.block_k % kPackK == 0);
}

}  // namespace latent::kernels::amx

LATENT_AMX_VBMI_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/bf16_rows.h"
#include "kernels/avx512/fp8_widen.h"
#include "kernels/amx/tile_blocks.h"

namespace latent::kernels::amx {
namespace {

using Fp8Job = Fp8PackedCall<uint8_t>;  // x: bf16 pairs, 64 bytes a tile (tile_blocks.h)
constexpr int64_t kTilePairs = kPackK / 2;  // k-pairs per tile
constexpr int64_t kSegmentTiles = 4;        // 64 k-pairs: one DeepSeek scale block of 128 k
constexpr int64_t kRunTiles = 64;           // batches: tiles of k staged at once (2 x 64 KiB)
constexpr int64_t kRunMinRows = 64;  // batches of more rows stage runs
constexpr int64_t kPairCols = 2 * kTileRows;  // outputs of a column pair
constexpr int64_t kFp8Prefetch = 2048;  // bytes of codes ahead in each block's stream

// Widens tiles [t0, t1) of column block b into stage [t1 - t0][1 KiB bf16 tile], prefetching
// the block's codes ahead (without it the kernel read a third less at m = 1).
void StageTiles(const Fp8Job& j, int64_t b, int64_t t0, int64_t t1, uint8_t* stage) {
  const int64_t start = b * j.block_bytes + t0 * kPackFp8TileBytes;  // bytes from j.packed
  const int64_t end = (j.row0 + j.n + kTileRows - 1) / kTileRows * j.block_bytes;
  avx512::WidenFp8Run(j.packed + start, (t1 - t0) * kTilePairs, reinterpret_cast<uint16_t*>(stage),
                      kFp8Prefetch, end - start);
}

// Activation rows [m0, m0 + 16 MT) (decode: the m rows of one tile; the first `rows` of them
// real) x NB (1..2) staged column blocks over one segment's `tiles` tiles from tile t0 of x, the
// blocks' staged tiles at w0 and w1: sums from zero, then acc = fma(sum, scales[s], first ? 0 :
// acc) for acc [rows from m0, kPairCols], column 16 s for block s.
template <int MT, int NB>
void SegmentTiles(const Fp8Job& j, int64_t m0, int64_t rows, const uint8_t* w0, const uint8_t* w1,
                  int64_t t0, int64_t tiles, const __m512* scales, bool first, float* acc) {
  const int64_t lda = TileActivationRowTiles(j.tiles) * kTileRowBytes;
  const uint8_t* a = j.x + m0 * lda + t0 * kTileRowBytes;
  _tile_zero(0);
  if constexpr (MT > 1) _tile_zero(1);
  if constexpr (NB > 1) _tile_zero(2);
  if constexpr (MT > 1 && NB > 1) _tile_zero(3);
  for (int64_t kk = 0; kk < tiles; ++kk) {
    _tile_loadd(4, a + kk * kTileRowBytes, lda);
    if constexpr (MT > 1) _tile_loadd(5, a + kTileRows * lda + kk * kTileRowBytes, lda);
    _tile_loadd(6, w0 + kk * kTileBytes, kTileRowBytes);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (MT > 1) _tile_dpbf16ps(1, 5, 6);
    if constexpr (NB > 1) {
      _tile_loadd(7, w1 + kk * kTileBytes, kTileRowBytes);
      _tile_dpbf16ps(2, 4, 7);
      if constexpr (MT > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float c[2 * kTileRows][kPairCols];  // the segment's sums: [rows][block 0, block 1]
  constexpr int64_t ldc = kPairCols * sizeof(float);
  _tile_stored(0, &c[0][0], ldc);
  if constexpr (MT > 1) _tile_stored(1, &c[kTileRows][0], ldc);
  if constexpr (NB > 1) _tile_stored(2, &c[0][kTileRows], ldc);
  if constexpr (MT > 1 && NB > 1) _tile_stored(3, &c[kTileRows][kTileRows], ldc);
  for (int64_t r = 0; r < rows; ++r) {
    for (int s = 0; s < NB; ++s) {
      float* out = acc + (m0 + r) * kPairCols + s * kTileRows;
      const __m512 before = first ? _mm512_setzero_ps() : _mm512_load_ps(out);
      const __m512 sum = _mm512_load_ps(&c[r][s * kTileRows]);
      _mm512_store_ps(out, _mm512_fmadd_ps(sum, scales[s], before));
    }
  }
}

// One segment: pairs from p0, whole tiles [t0, t0 + tiles), and its column blocks' scales.
struct Segment {
  int64_t p0, t0, tiles;
  __m512 scales[2];
};

// The segment starting at pair p0 (< k) of column blocks [b, b + blocks); returns its end pair.
int64_t MakeSegment(const Fp8Job& j, int64_t b, int64_t blocks, int64_t p0, Segment& g) {
  const int64_t p1 = Fp8SegmentEnd(j, p0, kSegmentTiles * kTilePairs);
  g.p0 = p0;
  g.t0 = p0 / kTilePairs;
  g.tiles = p1 / kTilePairs - g.t0;  // whole tiles (AmxTakesFp8)
  for (int64_t s = 0; s < blocks; ++s) g.scales[s] = avx512::Fp8BlockScales(j, b + s, p0);
  return p1;
}

// Segment g of `blocks` column blocks, staged at w0 and w1, for activation rows [r0, r1): tile
// pairs of rows, then a lone tile.
void SegmentRows(const Fp8Job& j, int64_t r0, int64_t r1, const uint8_t* w0, const uint8_t* w1,
                 const Segment& g, int64_t blocks, float* acc) {
  const bool first = g.p0 == 0;
  for (int64_t m0 = r0; m0 < r1; m0 += 2 * kTileRows) {
    const int64_t rows = std::min(2 * kTileRows, r1 - m0);
    if (rows > kTileRows) {
      blocks == 2 ? SegmentTiles<2, 2>(j, m0, rows, w0, w1, g.t0, g.tiles, g.scales, first, acc)
                  : SegmentTiles<2, 1>(j, m0, rows, w0, w1, g.t0, g.tiles, g.scales, first, acc);
    } else {
      blocks == 2 ? SegmentTiles<1, 2>(j, m0, rows, w0, w1, g.t0, g.tiles, g.scales, first, acc)
                  : SegmentTiles<1, 1>(j, m0, rows, w0, w1, g.t0, g.tiles, g.scales, first, acc);
    }
  }
}

// Column pair [b, b + blocks) for batches of more than kRunMinRows rows: k in runs of segments
// of up to kRunTiles tiles, each run widened once into a stage in L2 that every block of rows
// (kActivationBlockBytes of activations per run) then reads segment by segment.
void RunBlocks(const Fp8Job& j, int64_t b, int64_t blocks, float* acc) {
  thread_local std::vector<uint8_t> buffer;
  uint8_t* stage = Aligned64(buffer, 2 * kRunTiles * kTileBytes);  // [2 blocks][kRunTiles][1 KiB]
  constexpr int64_t kPair = 2 * kTileRows;
  const int64_t run_bytes = std::min(j.tiles, kRunTiles) * kTileRowBytes;  // per activation row
  const int64_t row_block = std::max(kPair, kActivationBlockBytes / run_bytes / kPair * kPair);
  Segment segments[kRunTiles];
  // Segments from pairs past k would hold only the zero padding, and their scale block lies past
  // the scales' end: they are not run.
  for (int64_t p0 = 0; 2 * p0 < j.k;) {
    const int64_t run_t0 = p0 / kTilePairs;
    int64_t count = 0;
    while (2 * p0 < j.k) {
      // The run ends before the segment that would not fit (its scales not read for nothing).
      if (Fp8SegmentEnd(j, p0, kSegmentTiles * kTilePairs) / kTilePairs - run_t0 > kRunTiles) break;
      p0 = MakeSegment(j, b, blocks, p0, segments[count++]);
    }
    const int64_t run_end = segments[count - 1].t0 + segments[count - 1].tiles;
    for (int64_t s = 0; s < blocks; ++s) {
      StageTiles(j, b + s, run_t0, run_end, stage + s * kRunTiles * kTileBytes);
    }
    for (int64_t r0 = 0; r0 < j.m; r0 += row_block) {
      for (int64_t i = 0; i < count; ++i) {
        const uint8_t* w0 = stage + (segments[i].t0 - run_t0) * kTileBytes;
        SegmentRows(j, r0, std::min(j.m, r0 + row_block), w0, w0 + kRunTiles * kTileBytes,
                    segments[i], blocks, acc);
      }
    }
  }
}

// Column blocks [b0, b1) for every activation row. Decode and small batches take each column
// pair one segment at a time, its stage in L1; larger batches in runs (RunBlocks). A row's sums
// take the segments in k order either way, with the same operations.
void Fp8Blocks(const Fp8Job& j, int64_t b0, int64_t b1) {
  ConfigureTiles(std::min(j.m, kTileRows));  // decode: tiles of m rows; batches: whole tiles
  alignas(64) uint8_t stage[2 * kSegmentTiles * kTileBytes];  // 8 KiB
  thread_local std::vector<float> buffer;
  float* acc = Aligned64(buffer, TileActivationRows(j.m) * kPairCols);  // [rows, kPairCols]
  for (int64_t b = b0; b < b1; b += 2) {
    const int64_t blocks = std::min<int64_t>(2, b1 - b);
    if (j.m > kRunMinRows) {
      RunBlocks(j, b, blocks, acc);
    } else {
      for (int64_t p0 = 0; 2 * p0 < j.k;) {  // as in RunBlocks, no segment past k
        Segment g;
        const int64_t p1 = MakeSegment(j, b, blocks, p0, g);
        for (int64_t s = 0; s < blocks; ++s) {
          StageTiles(j, b + s, g.t0, g.t0 + g.tiles, stage + s * g.tiles * kTileBytes);
        }
        SegmentRows(j, 0, j.m, stage, stage + g.tiles * kTileBytes, g, blocks, acc);
        p0 = p1;
      }
    }
    CopyPackedOut(j, acc, kPairCols, 0, j.m, b, blocks);
  }
  _tile_release();
}

using LinearFn = void (*)(const float*, int64_t, const WeightRef&, float*, float*);
LinearFn g_next_linear = nullptr;  // the table's linear before FillAmxFp8Linear

void LinearFp8AmxOrNext(const float* x, int64_t m, const WeightRef& w, float* y,
                        float* scratch) {
  if (AmxTakesFp8(w) && w.ReadsPacked(PackedLayout::kFp8Tiles)) return LinearFp8Amx(x, m, w, y);
  g_next_linear(x, m, w, y, scratch);
}

}  // namespace

void LinearFp8Amx(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  LATENT_CHECK(AmxTakesFp8(w));
  w.ExpectPacked(PackedLayout::kFp8Tiles);
  Fp8Job j = MakeFp8PackedCall<uint8_t>(w, m, y);
  j.x = TileActivationsBf16(x, m, w.k, j.tiles);
  ForEachPackedBlockRange(w, m, [&j](int64_t b0, int64_t b1) { Fp8Blocks(j, b0, b1); });
}

void FillAmxFp8Linear(KernelTable& t) {
  g_next_linear = t.linear;
  t.linear = LinearFp8AmxOrNext;
}

}  // namespace latent::kernels::amx
LATENT_AMX_END
