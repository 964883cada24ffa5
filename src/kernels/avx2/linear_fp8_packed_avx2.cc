// Linear over fp8 e4m3 weights with block scales (DeepSeek V3's and Kimi K2's checkpoints) under
// bf16 compute on AVX2 FMAs over a packed copy of the codes in a layout of this kernel's own (one
// byte per weight; Fp8Avx2Pack): the fp8 kernel of the AVX2 packed table. The row-major AVX2 fp8
// linear (linear_avx2.cc) widens 8 codes of one row at a time and reduces each row at the end.
//
//   packed [ceil(n / 16) blocks] { header [32 bytes]; codes [kp][16 rows] }
//
// Each block holds 16 weight rows over all of k (rounded up to 32, zero past k and n), one k's 16
// codes a 16-byte line, so a load and a sign extension put them in widening order. The header's
// first uint16 has bit i set when row i holds a NaN code (see WidenK).
//
// As in avx512/linear_fp8_packed.cc, the block scale applies to partial sums:
//
//   y[m, r] = sum over segments g of s(r, g) * (sum over k in g of bf16(x)[m, k] . w[r, k])
//
// A segment is at most kSegmentPairs k-pairs inside one scale block. Each segment's sum is one f32
// FMA chain from zero over its k in order, then acc = fma(sum, 2^8 s, acc) in segment order: the
// same operations for every M, register tile and thread split (batch invariant).
//
// Widening: a code's sign and 7 magnitude bits, shifted into an f16's, are the f16 of the code's
// value times 2^-8, exactly (subnormals included), and vcvtph2ps makes it an f32; hence the 2^8
// on the scale. Per segment and column block the widened values go to a stage ([128 k][16 rows]
// f32: 8 KiB, L1) that every register tile of up to 6 rows then reads (staged_tile_avx2.h;
// batches of 24 rows or more read their activations in row tiles); decode (1-6 rows) widens in
// registers instead, with the same products in the same order.
//
// bench/kernels, 2-core Zen 3, n 10944 x k 2048 fp8 (128 x 128 scales) under bf16 compute, 2
// threads, against the row-major kernel: m = 64 53-56 -> 107-126 GFLOP/s, m = 512 56-65 -> 105-112,
// m = 6 41-48 -> 49-60, m = 1 5-9 -> 6-7 GB/s of codes (widening-bound either way). The 6-row
// staged tile and row tiles after the 4-row tile over rows, n 16384 x k 2048: m = 6 64 -> 78,
// m = 16 105 -> 112, m = 64 139 -> 161, m = 512 136 -> 167. This layout (one k's 16 codes per
// line: no byte shuffles; the NaN rows from the header, not a compare per code), named decode
// accumulators, two divisions per block's scales and decode tiles up to 4 rows, n 4096 x k 2048:
// m = 1 9.7 -> 19.4-19.9 GB/s of codes, m = 4 5.5 -> 11.6-12.2, m = 64 146 -> 144-166 GFLOP/s,
// m = 512 141 -> 147-168.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx2/rounded_rows_avx2.h"
#include "kernels/kernel_table.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"
// Last: defines the AVX2 helpers under the target pragma.
#include "kernels/avx2/avx2_common.h"
#include "kernels/avx2/staged_tile_avx2.h"

LATENT_AVX2_BEGIN
namespace latent::kernels::avx2 {
namespace {

constexpr int kDirectRows = 6;         // decode: at most this many rows, no stage
constexpr int64_t kSegmentPairs = 64;   // k-pairs per segment at most (128 k: DeepSeek's block)
constexpr int64_t kHeaderBytes = 32;    // a block's NaN-row mask, padded to keep codes aligned

using Fp8Job = Fp8PackedCall<float>;

// Bytes of one packed block: the header, then [kp][16] codes (kp: k rounded up to 32, as the
// rounded activation rows are).
int64_t BlockBytes(int64_t k) {
  return kHeaderBytes + (k + kPackK - 1) / kPackK * kPackK * kPackRows;
}

// The job for w's packed copy in this file's layout (MakeFp8PackedCall assumes the tile one).
Fp8Job MakeJob(const WeightRef& w, int64_t m, float* y) {
  Fp8Job j = MakeFp8PackedCall<float>(w, m, y);
  j.block_bytes = BlockBytes(w.k);
  return j;
}

const uint8_t* BlockCodes(const Fp8Job& j, int64_t b) {
  return j.packed + b * j.block_bytes + kHeaderBytes;
}

// The 16 codes of one k (a block's rows 0-15) as f32 values times 2^-8: rows 0-7 and 8-15.
// Each code's sign and 7 magnitude bits, shifted into an f16's sign and bits 13..7, are the f16
// of the code's value times 2^-8, exactly (subnormals included), and vcvtph2ps makes it an f32.
// The NaN code (magnitude 0x7f) comes out as 480 * 2^-8: its rows get a NaN scale instead
// (BlockScales), which makes every output of such a row NaN, as the reference's sum is.
inline __attribute__((always_inline)) void WidenK(const uint8_t* codes, __m256& rows0,
                                                  __m256& rows1) {
  const __m128i line = _mm_load_si128(reinterpret_cast<const __m128i*>(codes));
  const __m256i words = _mm256_cvtepi8_epi16(line);
  const __m256i half = _mm256_and_si256(_mm256_slli_epi16(words, 7),
                                        _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
  rows0 = _mm256_cvtph_ps(_mm256_castsi256_si128(half));
  rows1 = _mm256_cvtph_ps(_mm256_extracti128_si256(half, 1));
}

// Widens k-pairs [p0, p1) of column block b into stage [2 (p1 - p0)][16] (k, rows:
// staged_tile_avx2.h).
void StageSegment(const Fp8Job& j, int64_t b, int64_t p0, int64_t p1, float* stage) {
  const uint8_t* codes = BlockCodes(j, b);
  for (int64_t k = 2 * p0; k < 2 * p1; ++k) {
    __m256 rows0, rows1;
    WidenK(codes + k * kPackRows, rows0, rows1);
    _mm256_store_ps(stage + (k - 2 * p0) * kPackRows, rows0);
    _mm256_store_ps(stage + (k - 2 * p0) * kPackRows + 8, rows1);
  }
}

// The scales (times 2^8) of column block b's 16 packed rows for the k block holding pair p0, as
// two vectors of 8 rows; rows outside the view get 0 (their outputs are never copied out), rows
// holding a NaN code NaN. Decode calls it once per segment and block, so the common case (16 rows
// of the view under one scale, no NaN) takes two divisions, not 16.
void BlockScales(const Fp8Job& j, int64_t b, int64_t p0, __m256 scales[2]) {
  uint16_t nan_rows;
  std::memcpy(&nan_rows, j.packed + b * j.block_bytes, sizeof(nan_rows));
  const int64_t kb = j.scale != nullptr ? 2 * p0 / j.block_k : 0;
  if (j.scale != nullptr && nan_rows == 0) {
    // Both ends inside the view (so all 16 rows) under one scale.
    const int64_t first = Fp8ScaleIndex(j, b * kPackRows, kb);
    if (first >= 0 && first == Fp8ScaleIndex(j, b * kPackRows + kPackRows - 1, kb)) {
      scales[0] = scales[1] = _mm256_set1_ps(LoadAsF32(j.scale, j.scale_dtype, first) * kF8Unscale);
      return;
    }
  }
  alignas(32) float s[kPackRows];
  for (int64_t i = 0; i < kPackRows; ++i) {
    const int64_t row = b * kPackRows + i - j.row0;  // the view's row
    if (row < 0 || row >= j.n) {
      s[i] = 0.0f;
    } else if ((nan_rows >> i) & 1) {
      s[i] = std::numeric_limits<float>::quiet_NaN();
    } else if (j.scale == nullptr) {
      s[i] = kF8Unscale;
    } else {
      s[i] = LoadAsF32(j.scale, j.scale_dtype, Fp8ScaleIndex(j, b * kPackRows + i, kb)) *
             kF8Unscale;
    }
  }
  scales[0] = _mm256_load_ps(s);
  scales[1] = _mm256_load_ps(s + 8);
}

// MR activation rows from m0 (rows or a row tile, as kLayout says) over the staged segment of
// `pairs` k-pairs from pair p0: sums from zero, then acc = fma(sum, scale, first ? 0 : acc) for
// acc [MR rows of ld floats].
template <int MR, XLayout kLayout>
void Tile(const Fp8Job& j, int64_t m0, const float* stage, int64_t p0, int64_t pairs,
          const __m256 scales[2], bool first, float* acc, int64_t ld) {
  __m256 c[MR][2];
  for (int r = 0; r < MR; ++r) c[r][0] = c[r][1] = _mm256_setzero_ps();
  const float* x = j.x + m0 * j.kp + 2 * p0 * (kLayout == XLayout::kRows ? 1 : MR);
  StagedKs<MR, kLayout>(x, j.kp, stage, 2 * pairs, c);
  for (int r = 0; r < MR; ++r) {
    for (int h = 0; h < 2; ++h) {
      float* out = acc + r * ld + h * 8;
      const __m256 before = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out);
      _mm256_storeu_ps(out, _mm256_fmadd_ps(c[r][h], scales[h], before));
    }
  }
}

// The same sums as Tile for all MR (<= 6) activation rows and NB (<= 4; 1 above 4 rows) column
// blocks from b, widening the codes in registers as it reads them (a stage's store and reload
// would cost more than one register tile's products): per accumulator the same products in the
// same order, so the same bits. The accumulators are named registers (GCC stored an array of them
// to the stack on every k).
template <int MR, int NB>
void TileDirect(const Fp8Job& j, int64_t b, int64_t p0, int64_t p1, const __m256 (*scales)[2],
                bool first, float* acc, int64_t ld) {
  static_assert(MR >= 1 && MR <= 6 && NB >= 1 && NB <= 4 && (MR <= 4 || NB == 1));
  const uint8_t* codes[NB];
  for (int s = 0; s < NB; ++s) codes[s] = BlockCodes(j, b + s);
  const float* x = j.x;  // [MR][kp]
  const int64_t kp = j.kp;
  // clang-format off
#define LATENT_DIRECT_ACC(r, s) \
  __m256 c##r##s##0 = _mm256_setzero_ps(), c##r##s##1 = _mm256_setzero_ps();
  LATENT_DIRECT_ACC(0, 0) LATENT_DIRECT_ACC(0, 1) LATENT_DIRECT_ACC(0, 2) LATENT_DIRECT_ACC(0, 3)
  LATENT_DIRECT_ACC(1, 0) LATENT_DIRECT_ACC(1, 1) LATENT_DIRECT_ACC(1, 2) LATENT_DIRECT_ACC(1, 3)
  LATENT_DIRECT_ACC(2, 0) LATENT_DIRECT_ACC(2, 1) LATENT_DIRECT_ACC(2, 2) LATENT_DIRECT_ACC(2, 3)
  LATENT_DIRECT_ACC(3, 0) LATENT_DIRECT_ACC(3, 1) LATENT_DIRECT_ACC(3, 2) LATENT_DIRECT_ACC(3, 3)
  LATENT_DIRECT_ACC(4, 0) LATENT_DIRECT_ACC(4, 1) LATENT_DIRECT_ACC(4, 2) LATENT_DIRECT_ACC(4, 3)
  LATENT_DIRECT_ACC(5, 0) LATENT_DIRECT_ACC(5, 1) LATENT_DIRECT_ACC(5, 2) LATENT_DIRECT_ACC(5, 3)
#undef LATENT_DIRECT_ACC
  for (int64_t k = 2 * p0; k < 2 * p1; ++k) {
    // Up to 4 rows: each row's broadcast once per k, for all blocks. 5 or 6 rows (one block):
    // broadcast where used, one at a time (12 accumulators; GCC otherwise hoisted them all and
    // spilled two accumulators).
    constexpr bool kHoist = MR <= 4;
    const __m256 x0 = _mm256_broadcast_ss(x + k);
    const __m256 x1 = kHoist && MR > 1 ? _mm256_broadcast_ss(x + kp + k) : x0;
    const __m256 x2 = kHoist && MR > 2 ? _mm256_broadcast_ss(x + 2 * kp + k) : x0;
    const __m256 x3 = kHoist && MR > 3 ? _mm256_broadcast_ss(x + 3 * kp + k) : x0;
    const __m256 x4 = x0, x5 = x0;  // unused: rows 4 and 5 never hoist
#define LATENT_DIRECT_ROW(r, s)                                                    \
    if constexpr (MR > r) {                                                        \
      const __m256 xr =                                                            \
          kHoist ? x##r : InRegister(_mm256_broadcast_ss(x + r * kp + k));         \
      c##r##s##0 = _mm256_fmadd_ps(xr, w0, c##r##s##0);                           \
      c##r##s##1 = _mm256_fmadd_ps(xr, w1, c##r##s##1);                           \
    }
#define LATENT_DIRECT_BLOCK(s)                                  \
    if constexpr (NB > s) {                                     \
      __m256 w0, w1;                                            \
      WidenK(codes[s] + k * kPackRows, w0, w1);                 \
      LATENT_DIRECT_ROW(0, s) LATENT_DIRECT_ROW(1, s)           \
      LATENT_DIRECT_ROW(2, s) LATENT_DIRECT_ROW(3, s)           \
      LATENT_DIRECT_ROW(4, s) LATENT_DIRECT_ROW(5, s)           \
    }
    LATENT_DIRECT_BLOCK(0) LATENT_DIRECT_BLOCK(1) LATENT_DIRECT_BLOCK(2) LATENT_DIRECT_BLOCK(3)
#undef LATENT_DIRECT_BLOCK
#undef LATENT_DIRECT_ROW
  }
#define LATENT_DIRECT_OUT(r, s)                                                        \
  if constexpr (MR > r && NB > s) {                                                    \
    float* out = acc + r * ld + s * kPackRows;                                         \
    const __m256 before0 = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out);         \
    const __m256 before1 = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + 8);     \
    _mm256_storeu_ps(out, _mm256_fmadd_ps(c##r##s##0, scales[s][0], before0));         \
    _mm256_storeu_ps(out + 8, _mm256_fmadd_ps(c##r##s##1, scales[s][1], before1));     \
  }
  LATENT_DIRECT_OUT(0, 0) LATENT_DIRECT_OUT(0, 1) LATENT_DIRECT_OUT(0, 2) LATENT_DIRECT_OUT(0, 3)
  LATENT_DIRECT_OUT(1, 0) LATENT_DIRECT_OUT(1, 1) LATENT_DIRECT_OUT(1, 2) LATENT_DIRECT_OUT(1, 3)
  LATENT_DIRECT_OUT(2, 0) LATENT_DIRECT_OUT(2, 1) LATENT_DIRECT_OUT(2, 2) LATENT_DIRECT_OUT(2, 3)
  LATENT_DIRECT_OUT(3, 0) LATENT_DIRECT_OUT(3, 1) LATENT_DIRECT_OUT(3, 2) LATENT_DIRECT_OUT(3, 3)
  LATENT_DIRECT_OUT(4, 0) LATENT_DIRECT_OUT(4, 1) LATENT_DIRECT_OUT(4, 2) LATENT_DIRECT_OUT(4, 3)
  LATENT_DIRECT_OUT(5, 0) LATENT_DIRECT_OUT(5, 1) LATENT_DIRECT_OUT(5, 2) LATENT_DIRECT_OUT(5, 3)
#undef LATENT_DIRECT_OUT
  // clang-format on
}

// Column blocks the decode tile of MR rows takes at a time: at least 8 accumulators (3 to 6 rows:
// one block, 6 to 12 of them).
template <int MR>
constexpr int kDirectBlocks = MR == 1 ? 4 : MR == 2 ? 2 : 1;

// Decode (m <= kDirectRows): kDirectBlocks column blocks at a time, widening as it goes.
template <int MR>
void BlocksDirect(const Fp8Job& j, int64_t b0, int64_t b1) {
  constexpr int kNb = kDirectBlocks<MR>;
  constexpr int64_t ld = kNb * kPackRows;
  alignas(32) float acc[MR * ld];
  for (int64_t b = b0; b < b1;) {
    const int64_t blocks = std::min<int64_t>(kNb, b1 - b);
    for (int64_t p0 = 0; 2 * p0 < j.k;) {
      const int64_t p1 = Fp8SegmentEnd(j, p0, kSegmentPairs);
      __m256 scales[kNb][2];
      for (int64_t s = 0; s < blocks; ++s) BlockScales(j, b + s, p0, scales[s]);
      if (blocks == kNb) {
        TileDirect<MR, kNb>(j, b, p0, p1, scales, p0 == 0, acc, ld);
      } else {
        for (int64_t s = 0; s < blocks; ++s) {
          TileDirect<MR, 1>(j, b + s, p0, p1, scales + s, p0 == 0, acc + s * kPackRows, ld);
        }
      }
      p0 = p1;
    }
    CopyPackedOut(j, acc, ld, 0, MR, b, blocks);
    b += blocks;
  }
}

// Batches: column blocks [b0, b1) for every activation row, one block at a time, each segment
// widened once into a stage that every register tile reads.
template <XLayout kLayout>
void BlocksStaged(const Fp8Job& j, int64_t b0, int64_t b1) {
  alignas(32) float stage[2 * kSegmentPairs * kPackRows];  // 8 KiB
  const RowTiles tiles(j.m);
  const StagedRowBlocks row_blocks = MakeStagedRowBlocks(j.m, j.kp);
  const int64_t block_tiles = row_blocks.block_tiles;
  float* acc = row_blocks.acc;  // [rows of a row block, 16]
  for (int64_t i0 = 0; i0 < tiles.count; i0 += block_tiles) {
    const int64_t i1 = std::min(tiles.count, i0 + block_tiles);
    const int64_t r0 = tiles.Start(i0), r1 = tiles.Start(i1);
    for (int64_t b = b0; b < b1; ++b) {
      // Segments from pairs past k would hold only the zero padding, and their scale block lies
      // past the scales' end: they are not run.
      for (int64_t p0 = 0; 2 * p0 < j.k;) {
        const int64_t p1 = Fp8SegmentEnd(j, p0, kSegmentPairs);
        __m256 scales[2];
        BlockScales(j, b, p0, scales);
        StageSegment(j, b, p0, p1, stage);
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t m0 = tiles.Start(i);
          WithRowCount<kStagedRows>(tiles.Height(i), [&]<int MR>() {
            Tile<MR, kLayout>(j, m0, stage, p0, p1 - p0, scales, p0 == 0,
                              acc + (m0 - r0) * kPackRows, kPackRows);
          });
        }
        p0 = p1;
      }
      CopyPackedOut(j, acc, kPackRows, r0, r1 - r0, b, 1);
    }
  }
}

// Column blocks [b0, b1) for every activation row.
void Blocks(const Fp8Job& j, int64_t b0, int64_t b1) {
  if (j.m <= kDirectRows) {
    WithRowCount<kDirectRows>(j.m, [&]<int MR>() { BlocksDirect<MR>(j, b0, b1); });
  } else if (j.m < kRowTilesMinRows) {
    BlocksStaged<XLayout::kRows>(j, b0, b1);
  } else {
    BlocksStaged<XLayout::kRowTiles>(j, b0, b1);
  }
}

// y[m, n] = bf16(x)[m, k] . W[n, k]^T (W = codes x block scales) from w's packed copy.
void LinearFp8Packed(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  Fp8Job j = MakeJob(w, m, y);
  j.x = RoundedActivationsF32(x, m, w.k, j.kp);
  ForEachPackedBlockRange(w, m, [&j](int64_t b0, int64_t b1) { Blocks(j, b0, b1); });
}

// Rows [row, row + 16) of codes (row_bytes apart) from column c, 16 columns of them, transposed
// into out [16 k][16 rows]; the rows holding a NaN code (magnitude 0x7f) are or-ed into nan_rows.
void TransposeCodes16(const uint8_t* row, int64_t row_bytes, uint8_t* out, uint32_t& nan_rows) {
  const __m128i sign = _mm_set1_epi8(static_cast<char>(0x80)), ones = _mm_set1_epi8(-1);
  __m128i rows[16];  // [row] its 16 codes
  for (int i = 0; i < 16; ++i) {
    rows[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i * row_bytes));
    const int nan = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_or_si128(rows[i], sign), ones));
    nan_rows |= static_cast<uint32_t>(nan != 0) << i;
  }
  // Each round interleaves runs of rows twice as long: pairs of rows per k, then quads, octets.
  __m128i pairs[8][2];  // [rows 2 g, 2 g + 1][k 8 h .. 8 h + 7]: 16-bit units per k
  for (int g = 0; g < 8; ++g) {
    pairs[g][0] = _mm_unpacklo_epi8(rows[2 * g], rows[2 * g + 1]);
    pairs[g][1] = _mm_unpackhi_epi8(rows[2 * g], rows[2 * g + 1]);
  }
  __m128i quads[4][4];  // [rows 4 g ..][k 4 q .. 4 q + 3]: 32-bit units per k
  for (int g = 0; g < 4; ++g) {
    for (int h = 0; h < 2; ++h) {
      quads[g][2 * h] = _mm_unpacklo_epi16(pairs[2 * g][h], pairs[2 * g + 1][h]);
      quads[g][2 * h + 1] = _mm_unpackhi_epi16(pairs[2 * g][h], pairs[2 * g + 1][h]);
    }
  }
  __m128i octets[2][8];  // [rows 8 g ..][k 2 o, 2 o + 1]: 64-bit units per k
  for (int g = 0; g < 2; ++g) {
    for (int q = 0; q < 4; ++q) {
      octets[g][2 * q] = _mm_unpacklo_epi32(quads[2 * g][q], quads[2 * g + 1][q]);
      octets[g][2 * q + 1] = _mm_unpackhi_epi32(quads[2 * g][q], quads[2 * g + 1][q]);
    }
  }
  for (int o = 0; o < 8; ++o) {
    _mm_store_si128(reinterpret_cast<__m128i*>(out + 2 * o * kPackRows),
                    _mm_unpacklo_epi64(octets[0][o], octets[1][o]));
    _mm_store_si128(reinterpret_cast<__m128i*>(out + (2 * o + 1) * kPackRows),
                    _mm_unpackhi_epi64(octets[0][o], octets[1][o]));
  }
}

}  // namespace

int64_t Fp8Avx2PackedBytes(const WeightRef& w) {
  if (!Fp8PacksFit(w)) return 0;
  return (w.n + kPackRows - 1) / kPackRows * BlockBytes(w.k);
}

void Fp8Avx2Pack(const WeightRef& w, void* out) {
  const int64_t n = w.n, k = w.k, block_bytes = BlockBytes(k);
  const int64_t kp = (block_bytes - kHeaderBytes) / kPackRows;
  const auto* codes = static_cast<const uint8_t*>(w.data);  // [n, k]
  auto* packed = static_cast<uint8_t*>(out);
  threads::ParallelFor((n + kPackRows - 1) / kPackRows, 4, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      uint8_t* block = packed + b * block_bytes;
      uint8_t* block_codes = block + kHeaderBytes;  // [kp][16]
      const int64_t rows = std::min<int64_t>(kPackRows, n - b * kPackRows);
      const uint8_t* first_row = codes + b * kPackRows * k;
      uint32_t nan_rows = 0;
      // Whole 16 x 16 squares, then the rest (the end of k, the end of n) code by code, zero past
      // n and k.
      const int64_t whole = rows == kPackRows ? k / 16 * 16 : 0;
      for (int64_t c = 0; c < whole; c += 16) {
        TransposeCodes16(first_row + c, k, block_codes + c * kPackRows, nan_rows);
      }
      std::memset(block_codes + whole * kPackRows, 0,
                  static_cast<size_t>((kp - whole) * kPackRows));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = whole; c < k; ++c) {
          const uint8_t code = first_row[r * k + c];
          block_codes[c * kPackRows + r] = code;
          if ((code & 0x7f) == 0x7f) nan_rows |= uint32_t{1} << r;
        }
      }
      std::memset(block, 0, kHeaderBytes);
      const auto mask = static_cast<uint16_t>(nan_rows);
      std::memcpy(block, &mask, sizeof(mask));
    }
  });
}

void FillFp8PackedLinear(KernelTable& t) {
  UseFp8PackedLinear<LinearFp8Packed, Fp8Avx2PackedBytes, Fp8Avx2Pack,
                     PackedLayout::kFp8Avx2Blocks, 0>(t);
}

}  // namespace latent::kernels::avx2
LATENT_AVX2_END
