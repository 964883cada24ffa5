// Linear over fp8 e4m3 weights with block scales (DeepSeek V3's and Kimi K2's checkpoints) under
// bf16 compute on AVX2 FMAs over the tile-packed copy of the codes (kernels/tile_pack.h's fp8
// layout, one byte per weight): the fp8 kernel of the AVX2 packed table. The row-major AVX2 fp8
// linear (linear_avx2.cc) widens 8 codes of one row at a time and reduces each row at the end.
//
// As in avx512/linear_fp8_packed.cc, the block scale applies to partial sums:
//
//   y[m, r] = sum over segments g of s(r, g) * (sum over pairs p in g of bf16(x)[m, p] . w[r, p])
//
// A segment is at most kSegmentPairs k-pairs inside one scale block. Each segment's sum is one f32
// FMA chain from zero over its pairs (k, then k + 1), then acc = fma(sum, 2^8 s, acc) in segment
// order: the same operations for every M, register tile and thread split (batch invariant).
//
// Widening: a code's sign and 7 magnitude bits, shifted into an f16's, are the f16 of the code's
// value times 2^-8, exactly (subnormals included; the code for NaN gets a NaN's exponent), and
// vcvtph2ps makes it an f32; hence the 2^8 on the scale. Each 32 bytes of the packed codes (8 rows'
// two k-pairs, interleaved as tile_pack.h says) become 4 x 8 f32 with one byte shuffle, one dword
// permute and two widenings. Per segment and column block the widened values go to a stage
// ([128 k][16 rows] f32: 8 KiB, L1) that every register tile of up to 6 rows then reads
// (staged_tile_avx2.h; batches of 24 rows or more read their activations in row tiles); decode
// (1-2 rows) widens in registers instead, with the same products in the same order.
//
// bench/kernels, 2-core Zen 3, n 10944 x k 2048 fp8 (128 x 128 scales) under bf16 compute, 2
// threads, against the row-major kernel: m = 64 53-56 -> 107-126 GFLOP/s, m = 512 56-65 -> 105-112,
// m = 6 41-48 -> 49-60, m = 1 5-9 -> 6-7 GB/s of codes (widening-bound either way). The 6-row
// staged tile and row tiles after the 4-row tile over rows, n 16384 x k 2048: m = 6 64 -> 78,
// m = 16 105 -> 112, m = 64 139 -> 161, m = 512 136 -> 167.
#include <algorithm>
#include <cstdint>
#include <cstring>
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

constexpr int kDirectRows = 2;          // decode: at most this many rows, no stage
constexpr int64_t kSegmentPairs = 64;   // k-pairs per segment at most (128 k: DeepSeek's block)
constexpr int64_t kLineBytes = 32;      // one k-pair of 16 rows: 32 codes

using Fp8Job = Fp8PackedCall<float>;

// 16 codes (sign-extended to words) -> their values times 2^-8 as f16 bits: sign to bit 15,
// exponent and mantissa to bits 13..7; the NaN code (magnitude 0x7f) gets exponent 31.
inline __m256i Fp8ToHalf(__m128i codes) {
  const __m256i w = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(codes), 7),
                                     _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
  const __m256i magnitude = _mm256_set1_epi16(0x3F80);
  const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(w, magnitude), magnitude);
  return _mm256_or_si256(w, _mm256_and_si256(nan, _mm256_set1_epi16(0x7E00)));
}

// The 32 bytes of packed codes at `codes` (rows 8 g .. 8 g + 7 of two k-pairs, interleaved as
// tile_pack.h says: inside each 16 bytes, 4 rows, bytes 0-7 the first pair's (k, k + 1) codes
// and bytes 8-15 the second's) as f32 values times 2^-8: the first pair's k and k + 1 values,
// then the second's, 8 rows each.
inline void WidenLines(const uint8_t* codes, __m256& k0, __m256& k1, __m256& k2, __m256& k3) {
  // Per 16 bytes: [pair 0 k, pair 0 k + 1, pair 1 k, pair 1 k + 1], 4 rows each; then the two
  // 4-row halves side by side (8 bytes = 8 rows of one pair and parity).
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15,
                                         0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
  const __m256i join = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
  v = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, split), join);
  const __m256i pair0 = Fp8ToHalf(_mm256_castsi256_si128(v));
  const __m256i pair1 = Fp8ToHalf(_mm256_extracti128_si256(v, 1));
  k0 = _mm256_cvtph_ps(_mm256_castsi256_si128(pair0));
  k1 = _mm256_cvtph_ps(_mm256_extracti128_si256(pair0, 1));
  k2 = _mm256_cvtph_ps(_mm256_castsi256_si128(pair1));
  k3 = _mm256_cvtph_ps(_mm256_extracti128_si256(pair1, 1));
}

// Widens k-pairs [p0, p1) (p0 and p1 even) of column block b into stage [2 (p1 - p0)][16] (k,
// rows: staged_tile_avx2.h). Each 64 bytes of codes hold two pairs (4 values of k), the first 32
// bytes rows 0-7 and the next rows 8-15.
void StageSegment(const Fp8Job& j, int64_t b, int64_t p0, int64_t p1, float* stage) {
  const uint8_t* block = j.packed + b * j.block_bytes;
  for (int64_t p = p0; p < p1; p += 2) {
    float* out = stage + 2 * (p - p0) * kPackRows;  // k = 2 p, 2 p + 1, 2 p + 2, 2 p + 3
    for (int g = 0; g < 2; ++g) {                   // rows 8 g .. 8 g + 7
      __m256 k0, k1, k2, k3;
      WidenLines(block + p * kLineBytes + 32 * g, k0, k1, k2, k3);
      _mm256_store_ps(out + 8 * g, k0);
      _mm256_store_ps(out + kPackRows + 8 * g, k1);
      _mm256_store_ps(out + 2 * kPackRows + 8 * g, k2);
      _mm256_store_ps(out + 3 * kPackRows + 8 * g, k3);
    }
  }
}

// The scales (times 2^8) of column block b's 16 packed rows for the k block holding pair p0, as
// two vectors of 8 rows; rows outside the view get 0 (their outputs are never copied out).
void BlockScales(const Fp8Job& j, int64_t b, int64_t p0, __m256 scales[2]) {
  alignas(32) float s[kPackRows];
  const int64_t kb = j.scale != nullptr ? 2 * p0 / j.block_k : 0;
  for (int64_t i = 0; i < kPackRows; ++i) {
    const int64_t row = b * kPackRows + i - j.row0;  // the view's row
    if (row < 0 || row >= j.n) {
      s[i] = 0.0f;
    } else if (j.scale == nullptr) {
      s[i] = kF8Unscale;
    } else {
      const int64_t at = (j.scale_row0 + row) / j.block_n * j.scale_cols + kb;
      s[i] = LoadAsF32(j.scale, j.scale_dtype, at) * kF8Unscale;
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

// The same sums as Tile for all MR (<= 2) activation rows and NB column blocks from b, widening
// the codes in registers as it reads them (decode: a stage's store and reload would cost more than
// the few rows' products): per accumulator the same products in the same order, so the same bits.
template <int MR, int NB>
void TileDirect(const Fp8Job& j, int64_t b, int64_t p0, int64_t p1, const __m256 (*scales)[2],
                bool first, float* acc, int64_t ld) {
  __m256 c[MR][NB][2];
  for (int r = 0; r < MR; ++r) {
    for (int s = 0; s < NB; ++s) c[r][s][0] = c[r][s][1] = _mm256_setzero_ps();
  }
  for (int64_t p = p0; p < p1; p += 2) {
    for (int s = 0; s < NB; ++s) {
      const uint8_t* codes = j.packed + (b + s) * j.block_bytes + p * kLineBytes;
      for (int g = 0; g < 2; ++g) {
        __m256 k0, k1, k2, k3;
        WidenLines(codes + 32 * g, k0, k1, k2, k3);
        for (int r = 0; r < MR; ++r) {
          const float* x = j.x + r * j.kp + 2 * p;
          __m256 v = _mm256_fmadd_ps(_mm256_broadcast_ss(x), k0, c[r][s][g]);
          v = _mm256_fmadd_ps(_mm256_broadcast_ss(x + 1), k1, v);
          v = _mm256_fmadd_ps(_mm256_broadcast_ss(x + 2), k2, v);
          c[r][s][g] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + 3), k3, v);
        }
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int s = 0; s < NB; ++s) {
      for (int h = 0; h < 2; ++h) {
        float* out = acc + r * ld + s * kPackRows + h * 8;
        const __m256 before = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out);
        _mm256_storeu_ps(out, _mm256_fmadd_ps(c[r][s][h], scales[s][h], before));
      }
    }
  }
}

// Decode (m <= 2): NB column blocks at a time (8 accumulators), widening as it goes.
template <int MR>
void BlocksDirect(const Fp8Job& j, int64_t b0, int64_t b1) {
  constexpr int kNb = MR == 1 ? 4 : 2;
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
  Fp8Job j = MakeFp8PackedCall<float>(w, m, y);
  j.x = RoundedActivationsF32(x, m, w.k, j.kp);
  ForEachPackedBlockRange(w, m, [&j](int64_t b0, int64_t b1) { Blocks(j, b0, b1); });
}

}  // namespace

void FillFp8PackedLinear(KernelTable& t) {
  UseFp8PackedLinear<LinearFp8Packed, Fp8TilePack, 0>(t);
}

}  // namespace latent::kernels::avx2
LATENT_AVX2_END
