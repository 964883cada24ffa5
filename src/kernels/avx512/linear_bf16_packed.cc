// Linear over bf16 weights with bf16 activations (bf16 compute, WeightRef::bf16_activations) on
// vdpbf16ps over the tile-packed copy of the weights (kernels/tile_pack.h): the kernel for CPUs
// with AVX512_BF16 and no AMX (AMD Zen 4/5), blocked for every M with one summation order.
//
// In the packed layout one k-pair of a block's 16 weight rows is one 64-byte line, so
//
//   acc[r][b] (16 outputs of activation row r) = vdpbf16ps(acc, broadcast(x[r] pair p), line p)
//
// runs over k pairs in order from zero: every output is one f32 chain over k, the same for every
// M, every position in a register tile, every thread split and both paths below (an f32 store
// and reload between k chunks changes nothing). So it is batch invariant as the other kernels
// are. Its order differs from the row-major vdpbf16ps kernel's (linear_bf16dot.cc: 16 lanes,
// reduced at the end) and from TDPBF16PS's (AMX sums a tile's 32 products in its own way: they
// do not match bit for bit, so neither kernel can stand in for the other at some M).
//
// Blocking. Register tiles of up to 6 activation rows x 4 column blocks (24 accumulators, one
// weight line per block and one broadcast per row per k-pair). Decode (m <= 6): one tile over all
// of k, the accumulators in registers, 4 weight streams in order. Batches: for each group of 4
// column blocks, k in chunks of 8 tiles (4 x 8 KiB of weights, which stay in L1 while every
// activation tile goes past them), the accumulators in an f32 buffer [m, 64] (L2) between chunks.
// Threads split N into groups of whole column blocks.
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/bf16_target.h"
#include "kernels/kernel_table.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

LATENT_AVX512_BF16_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/bf16_rows.h"

namespace latent::kernels::avx512 {
namespace {

constexpr int kRowsPerTile = 6;      // activation rows per register tile
constexpr int kBlocksPerTile = 4;    // column blocks (16 outputs each) per register tile
constexpr int64_t kChunkTiles = 8;   // batches: k tiles (of 32) per pass over the accumulators
constexpr int64_t kGroupCols = kBlocksPerTile * kPackRows;  // outputs per column group (64)

using PackedJob = PackedCall<uint16_t>;

// MR activation rows from m0 x NB column blocks from b, over k tiles [t0, t1). acc: [MR rows of
// ld floats], column 16 s for block b + s; zeroed first when t0 == 0, else loaded, then stored.
// No software prefetch: the weight streams are sequential, which Zen 5's hardware prefetchers
// follow on their own. Prefetching 4 KiB ahead in each stream, as this kernel did, cost 12% of
// read bandwidth in a plain 4-stream read on Zen 5 (1 KiB ahead: 6%) and about 4-6% of the
// batch-1 GEMV; with none, 4 streams read as fast as one.
template <int MR, int NB>
void Tile(const PackedJob& j, int64_t m0, int64_t b, int64_t t0, int64_t t1, float* acc,
          int64_t ld) {
  __m512 c[MR][NB];
  for (int r = 0; r < MR; ++r) {
    for (int s = 0; s < NB; ++s) {
      c[r][s] = t0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + r * ld + s * kPackRows);
    }
  }
  const uint8_t* w[NB];
  for (int s = 0; s < NB; ++s) w[s] = j.packed + (b + s) * j.block_bytes;
  const uint16_t* x = j.x + m0 * j.kp;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t at = t * kPackTileBytes;
    for (int64_t p = 0; p < kPackRows; ++p) {
      __m512i line[NB];
      for (int s = 0; s < NB; ++s) line[s] = _mm512_load_si512(w[s] + at + p * 64);
      for (int r = 0; r < MR; ++r) {
        int32_t pair;
        std::memcpy(&pair, x + r * j.kp + t * kPackK + 2 * p, 4);
        const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
        for (int s = 0; s < NB; ++s) c[r][s] = _mm512_dpbf16_ps(c[r][s], a, (__m512bh)line[s]);
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int s = 0; s < NB; ++s) _mm512_storeu_ps(acc + r * ld + s * kPackRows, c[r][s]);
  }
}

template <int NB>
void TileAnyRows(const PackedJob& j, int64_t m0, int64_t rows, int64_t b, int64_t t0, int64_t t1,
                 float* acc, int64_t ld) {
  WithRowCount<kRowsPerTile>(rows, [&]<int MR>() { Tile<MR, NB>(j, m0, b, t0, t1, acc, ld); });
}

void TileAnyShape(const PackedJob& j, int64_t m0, int64_t rows, int64_t b, int64_t blocks,
                  int64_t t0, int64_t t1, float* acc, int64_t ld) {
  switch (blocks) {
    case 4: TileAnyRows<4>(j, m0, rows, b, t0, t1, acc, ld); break;
    case 3: TileAnyRows<3>(j, m0, rows, b, t0, t1, acc, ld); break;
    case 2: TileAnyRows<2>(j, m0, rows, b, t0, t1, acc, ld); break;
    default: TileAnyRows<1>(j, m0, rows, b, t0, t1, acc, ld); break;
  }
}

// Column blocks [b0, b1) for every activation row.
void Blocks(const PackedJob& j, int64_t b0, int64_t b1) {
  if (j.m <= kRowsPerTile) {  // decode: one register tile over all of k per group
    alignas(64) float acc[kRowsPerTile * kGroupCols];
    for (int64_t b = b0; b < b1; b += kBlocksPerTile) {
      const int64_t blocks = std::min<int64_t>(kBlocksPerTile, b1 - b);
      TileAnyShape(j, 0, j.m, b, blocks, 0, j.tiles, acc, kGroupCols);
      CopyPackedOut(j, acc, kGroupCols, 0, j.m, b, blocks);
    }
    return;
  }
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < j.m * kGroupCols) buffer.resize(j.m * kGroupCols);
  float* acc = buffer.data();
  for (int64_t b = b0; b < b1; b += kBlocksPerTile) {
    const int64_t blocks = std::min<int64_t>(kBlocksPerTile, b1 - b);
    for (int64_t t0 = 0; t0 < j.tiles; t0 += kChunkTiles) {
      const int64_t t1 = std::min(j.tiles, t0 + kChunkTiles);
      for (int64_t m0 = 0; m0 < j.m; m0 += kRowsPerTile) {
        const int64_t rows = std::min<int64_t>(kRowsPerTile, j.m - m0);
        TileAnyShape(j, m0, rows, b, blocks, t0, t1, acc + m0 * kGroupCols, kGroupCols);
      }
    }
    CopyPackedOut(j, acc, kGroupCols, 0, j.m, b, blocks);
  }
}

// y[m, n] = bf16(x)[m, k] . W[n, k]^T from w's packed copy.
void LinearPacked(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  PackedJob j = MakePackedCall<uint16_t>(w, m, y);
  j.x = RoundedRows(x, m, w.k, j.kp);
  ForEachPackedBlockRange(w, m, [&j](int64_t b0, int64_t b1) { Blocks(j, b0, b1); });
}

}  // namespace

void FillBf16PackedLinear(KernelTable& t) {
  UseTilePackedLinear<LinearPacked, TilePackAvx512>(t);
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_BF16_END
