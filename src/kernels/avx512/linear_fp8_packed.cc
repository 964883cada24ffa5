// Linear over fp8 e4m3 weights with block scales (DeepSeek V3's and Kimi K2's checkpoints) under
// bf16 compute (WeightRef::bf16_activations) on vdpbf16ps over the tile-packed copy of the codes
// (kernels/tile_pack.h, one byte per weight): the fp8 kernel for CPUs with AVX512_BF16 and
// AVX512-VBMI. The unpacked AVX-512 fp8 linear (linear_avx512.cc) widens every weight to f32 for
// f32 FMAs. bench/kernels, 2-core Zen 5, 10944 x 2048, 2 threads, against it: m = 1 17 -> 26 GB/s
// of codes, m = 6 98 -> 204 GFLOP/s, m = 64 115 -> 330, m = 512 128 -> 364 (bf16 weights on the
// packed bf16 kernel: 30 GB/s, 182, 369, 386).
//
// Every e4m3 value is exactly a bf16 (3 mantissa bits, exponents 2^-9 .. 2^8), so the codes widen
// to bf16 with no rounding and the block scale applies to partial sums, as DeepSeek's own fp8
// GEMM does:
//
//   y[m, r] = sum over segments g of s(r, g) * (sum over pairs p in g of bf16(x)[m, p] . w[r, p])
//
// A segment is at most kSegmentPairs k-pairs inside one scale block (DeepSeek's 128 x 128 blocks:
// one segment per block). Each segment's sum is one f32 chain over its pairs from zero, then
// acc = fma(sum, scale, acc) in segment order: the same operations for every M, position in a
// register tile and thread split, so the kernel is batch invariant as the others are.
//
// Widening: two lines (64 codes) at a time, each byte of the bf16 looked up in a 128-entry table
// by vpermi2b and the two bytes interleaved by vpunpck{l,h}bw (the packed layout pre-interleaves
// the codes so that this puts them in line order): 6 instructions per 64 codes, against 8 per 32
// for word lookups and 9 per 32 through vcvtph2ps.
//
// Blocking, per group of 4 column blocks (64 outputs) and segment:
//   decode (m <= 6): one register tile of m rows x 4 blocks widens each line as it reads it;
//   batches: the segment's codes are first widened into a bf16 stage (4 x 64 lines of 64 bytes:
//     16 KiB, L1), then every register tile of up to 6 rows x 4 blocks goes past it. Widening
//     costs about as much as 6 products per line, so doing it once per segment and not once per
//     register tile is what keeps prefill shapes at vdpbf16ps's pace.
// The accumulators between segments live in an f32 buffer [m, 64] (decode: on the stack).
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/bf16_target.h"
#include "kernels/kernel_table.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

LATENT_AVX512_BF16_VBMI_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/bf16_rows.h"
#include "kernels/avx512/fp8_widen.h"

namespace latent::kernels::avx512 {
namespace {

constexpr int kFp8RowsPerTile = 6;    // activation rows per register tile
constexpr int kFp8BlocksPerTile = 4;  // column blocks (16 outputs each) per register tile
constexpr int64_t kFp8GroupCols = kFp8BlocksPerTile * kPackRows;  // outputs per group (64)
constexpr int64_t kSegmentPairs = 64;  // k-pairs per segment at most (128 k: DeepSeek's block)

using Fp8Job = Fp8PackedCall<uint16_t>;

// Widens k-pairs [p0, p1) (p0 and p1 even) of `blocks` column blocks from b into
// stage [blocks][p1 - p0][32 bf16]. Pair p is line p % 16 of tile p / 16: lines run on across
// tiles (16 x 32 bytes each).
void StageFp8Segment(const Fp8Job& j, int64_t b, int64_t blocks, int64_t p0, int64_t p1,
                     uint16_t* stage) {
  for (int64_t s = 0; s < blocks; ++s) {
    WidenFp8Run(j.packed + (b + s) * j.block_bytes + p0 * kFp8LineBytes, p1 - p0,
                stage + s * (p1 - p0) * 32);
  }
}

// MR activation rows from m0 x NB staged column blocks over the segment's `pairs` k-pairs (from
// pair p0 of x): sums from zero, then acc = fma(sum, scale, first ? 0 : acc) for acc [MR rows
// of ld floats], column 16 s for block s.
template <int MR, int NB>
void Fp8Tile(const Fp8Job& j, int64_t m0, const uint16_t* stage, int64_t p0, int64_t pairs,
          const __m512* scales, bool first, float* acc, int64_t ld) {
  __m512 c[MR][NB];
  for (int r = 0; r < MR; ++r) {
    for (int s = 0; s < NB; ++s) c[r][s] = _mm512_setzero_ps();
  }
  const uint16_t* x = j.x + m0 * j.kp + 2 * p0;
  for (int64_t p = 0; p < pairs; ++p) {
    __m512i line[NB];
    for (int s = 0; s < NB; ++s) line[s] = _mm512_load_si512(stage + (s * pairs + p) * 32);
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, x + r * j.kp + 2 * p, 4);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
      for (int s = 0; s < NB; ++s) c[r][s] = _mm512_dpbf16_ps(c[r][s], a, (__m512bh)line[s]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int s = 0; s < NB; ++s) {
      float* out = acc + r * ld + s * kPackRows;
      const __m512 before = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out);
      _mm512_storeu_ps(out, _mm512_fmadd_ps(c[r][s], scales[s], before));
    }
  }
}

// The same sums as Fp8Tile for all MR (<= 6) activation rows from row 0, widening the codes as
// it goes instead of from a stage (decode: each line is used by so few rows that a stage's store
// and reload would cost more than the products): per accumulator the same products in the same
// pair order, so the same bits. The x pairs are broadcast from memory into each product.
template <int MR, int NB>
void Fp8TileDirect(const Fp8Job& j, int64_t b, int64_t p0, int64_t p1, const __m512* scales,
                   bool first, float* acc, int64_t ld) {
  const Fp8ToBf16Bytes& tables = Fp8Tables();
  __m512 c[MR][NB];
  for (int r = 0; r < MR; ++r) {
    for (int s = 0; s < NB; ++s) c[r][s] = _mm512_setzero_ps();
  }
  const uint8_t* w[NB];
  for (int s = 0; s < NB; ++s) w[s] = j.packed + (b + s) * j.block_bytes;
  for (int64_t p = p0; p < p1; p += 2) {
    for (int s = 0; s < NB; ++s) {
      __m512i line0, line1;
      WidenFp8Lines(w[s] + p * kFp8LineBytes, tables, line0, line1);
      for (int r = 0; r < MR; ++r) {
        int32_t pair[2];
        std::memcpy(pair, j.x + r * j.kp + 2 * p, 8);
        c[r][s] = _mm512_dpbf16_ps(c[r][s], (__m512bh)_mm512_set1_epi32(pair[0]), (__m512bh)line0);
        c[r][s] = _mm512_dpbf16_ps(c[r][s], (__m512bh)_mm512_set1_epi32(pair[1]), (__m512bh)line1);
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int s = 0; s < NB; ++s) {
      float* out = acc + r * ld + s * kPackRows;
      const __m512 before = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out);
      _mm512_storeu_ps(out, _mm512_fmadd_ps(c[r][s], scales[s], before));
    }
  }
}

template <int NB>
void Fp8TileDirectAnyRows(const Fp8Job& j, int64_t b, int64_t p0, int64_t p1,
                          const __m512* scales, bool first, float* acc, int64_t ld) {
  WithRowCount<kFp8RowsPerTile>(j.m, [&]<int MR>() {
    Fp8TileDirect<MR, NB>(j, b, p0, p1, scales, first, acc, ld);
  });
}

template <int NB>
void Fp8TileAnyRows(const Fp8Job& j, int64_t m0, int64_t rows, const uint16_t* stage, int64_t p0,
                 int64_t pairs, const __m512* scales, bool first, float* acc, int64_t ld) {
  WithRowCount<kFp8RowsPerTile>(rows, [&]<int MR>() {
    Fp8Tile<MR, NB>(j, m0, stage, p0, pairs, scales, first, acc, ld);
  });
}

void Fp8TileAnyShape(const Fp8Job& j, int64_t m0, int64_t rows, int64_t blocks,
                  const uint16_t* stage, int64_t p0, int64_t pairs, const __m512* scales,
                  bool first, float* acc, int64_t ld) {
  switch (blocks) {
    case 4: Fp8TileAnyRows<4>(j, m0, rows, stage, p0, pairs, scales, first, acc, ld); break;
    case 3: Fp8TileAnyRows<3>(j, m0, rows, stage, p0, pairs, scales, first, acc, ld); break;
    case 2: Fp8TileAnyRows<2>(j, m0, rows, stage, p0, pairs, scales, first, acc, ld); break;
    default: Fp8TileAnyRows<1>(j, m0, rows, stage, p0, pairs, scales, first, acc, ld); break;
  }
}

// Column blocks [b0, b1) for every activation row.
void Fp8Blocks(const Fp8Job& j, int64_t b0, int64_t b1) {
  alignas(64) uint16_t stage[kFp8BlocksPerTile * kSegmentPairs * 32];  // 16 KiB
  alignas(64) float decode_acc[kFp8RowsPerTile * kFp8GroupCols];
  thread_local std::vector<float> buffer;
  float* acc = decode_acc;
  if (j.m > kFp8RowsPerTile) {
    if (static_cast<int64_t>(buffer.size()) < j.m * kFp8GroupCols) {
      buffer.resize(j.m * kFp8GroupCols);
    }
    acc = buffer.data();
  }
  for (int64_t b = b0; b < b1; b += kFp8BlocksPerTile) {
    const int64_t blocks = std::min<int64_t>(kFp8BlocksPerTile, b1 - b);
    // Segments from pairs past k would hold only the zero padding, and their scale block lies
    // past the scales' end: they are not run.
    for (int64_t p0 = 0; 2 * p0 < j.k;) {
      const int64_t p1 = Fp8SegmentEnd(j, p0, kSegmentPairs);
      __m512 scales[kFp8BlocksPerTile];
      for (int64_t s = 0; s < blocks; ++s) scales[s] = Fp8BlockScales(j, b + s, p0);
      if (j.m <= kFp8RowsPerTile) {  // decode: one register tile, widening as it goes
        switch (blocks) {
          case 4: Fp8TileDirectAnyRows<4>(j, b, p0, p1, scales, p0 == 0, acc, kFp8GroupCols); break;
          case 3: Fp8TileDirectAnyRows<3>(j, b, p0, p1, scales, p0 == 0, acc, kFp8GroupCols); break;
          case 2: Fp8TileDirectAnyRows<2>(j, b, p0, p1, scales, p0 == 0, acc, kFp8GroupCols); break;
          default: Fp8TileDirectAnyRows<1>(j, b, p0, p1, scales, p0 == 0, acc, kFp8GroupCols);
        }
      } else {  // batches: widen once, then every register tile of rows
        StageFp8Segment(j, b, blocks, p0, p1, stage);
        for (int64_t m0 = 0; m0 < j.m; m0 += kFp8RowsPerTile) {
          const int64_t rows = std::min<int64_t>(kFp8RowsPerTile, j.m - m0);
          Fp8TileAnyShape(j, m0, rows, blocks, stage, p0, p1 - p0, scales, p0 == 0,
                          acc + m0 * kFp8GroupCols, kFp8GroupCols);
        }
      }
      p0 = p1;
    }
    CopyPackedOut(j, acc, kFp8GroupCols, 0, j.m, b, blocks);
  }
}

// y[m, n] = bf16(x)[m, k] . W[n, k]^T (W = codes x block scales) from w's packed copy.
void LinearFp8Packed(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  Fp8Job j = MakeFp8PackedCall<uint16_t>(w, m, y);
  j.x = RoundedRows(x, m, w.k, j.kp);
  ForEachPackedBlockRange(w, m, [&j](int64_t b0, int64_t b1) { Fp8Blocks(j, b0, b1); });
}

}  // namespace

void FillFp8PackedLinear(KernelTable& t, Fp8PackedSlot slot) {
  if (slot == Fp8PackedSlot::kAmxTable) {
    UseFp8PackedLinear<LinearFp8Packed, Fp8TilePackedBytes, Fp8TilePackAvx512,
                       PackedLayout::kFp8Tiles, 1>(t);
  } else {
    UseFp8PackedLinear<LinearFp8Packed, Fp8TilePackedBytes, Fp8TilePackAvx512,
                       PackedLayout::kFp8Tiles, 0>(t);
  }
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_BF16_END
