// AMX linear over bf16 weights with bf16 activations (bf16 compute, WeightRef::bf16_activations):
// y[m, n] = bf16(x)[m, k] . W[n, k]^T with TDPBF16PS (16 x 32 bf16 tiles, f32 accumulation).
//
// Weights are repacked once at load (kernels/tile_pack.h, through KernelTable::pack) into the layout a B tile
// reads: for each block of 16 weight rows (output columns), for each 32-wide block of k, one
// 1 KiB tile of [16 k-pairs][16 columns][2] bf16 (VNNI pairs), zero-padded past n and k:
//
//   packed[n / 16][k / 32][16][16][2], packed[b][kb][p][j][e] = W[16 b + j, 32 kb + 2 p + e]
//
// so every tile is one contiguous 1 KiB read and a weight is streamed in order. Weights without a
// packed copy (built outside the loader) go to the kernel this one wraps (the vdpbf16ps kernel):
// a weight is always computed by the same kernel.
//
// Summation order (the contract that keeps batched = alone): each output y[m, n] is one lane of
// an f32 accumulator tile, zeroed, then one TDPBF16PS per 32-wide block of k, in order (the last
// block zero-padded; an f32 store and reload between k chunks changes nothing). A tile's rows are
// independent (row r of C only reads row r of A): decode (m <= 16) configures its activation and
// accumulator tiles with m rows, batches use whole 16-row tiles over a copy of the rounded
// activations whose rows past m are zero, and a row's arithmetic is the same in both, so it does
// not depend on M, on the other rows, on where it sits in its tile, or on the thread that runs
// its columns (threads split N into whole column blocks). TDPBF16PS ignores MXCSR (round to
// nearest even, denormal inputs and outputs flushed), as vdpbf16ps does.
//
// Blocking. Decode (m <= 16, one activation tile): 4 accumulators over all of k, one A tile, the
// 4 weight streams of 4 column blocks read in turn into the three B tiles, with software
// prefetch 4 KiB ahead in each (without it, a third slower). Batches: k in chunks of 512; per
// chunk, each pair of column blocks meets every 32-row tile pair (2 x 2 accumulators, loaded
// from and stored to an f32 buffer between chunks: exact, so the same sums), so its weights come
// from memory once per call. Threads split N into groups of whole column blocks.
//
// Speed (bench/kernels, one thread of a 2-core Xeon with AMX, DeepSeek-sized bf16 weights):
// against the AVX-512 vdpbf16ps kernel, 1.5-2x at m = 8, 2.5-4.5x from m = 16 (prefill m = 512:
// about 4x, and above oneDNN's bf16 matmul), level at m = 4. At m = 1 and 2 (both stream the
// weights from memory) it depends on the pages: with vdpbf16ps also on huge pages (the bench's
// default) AMX is 10-20% slower in CPU time; with vdpbf16ps reading a mapped file as the engine
// does (--file), level in CPU time and faster in wall time. In the engine, where the vdpbf16ps
// kernel reads the mapped checkpoint, AMX wins at every batch: the default on CPUs with AMX
// (dispatch.cc, kAmxByDefault, has the figures).
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/amx/amx_kernels.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

// clang-format off
#if defined(LATENT_EMULATE_AVX512)  // see kernels/avx512/intrinsics.h
#define LATENT_AMX_BEGIN
#define LATENT_AMX_END
#elif defined(__clang__)
#define LATENT_AMX_BEGIN _Pragma("clang attribute push(__attribute__((target(\"amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi,bmi2\"))), apply_to = function)")
#define LATENT_AMX_END _Pragma("clang attribute pop")
#else
#define LATENT_AMX_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi,bmi2\")")
#define LATENT_AMX_END _Pragma("GCC pop_options")
#endif
// clang-format on

LATENT_AMX_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/bf16_rows.h"

namespace latent::kernels::amx {
namespace {

constexpr int64_t kTileRows = kPackRows;       // rows of every tile (activation rows, k-pairs, outputs)
constexpr int64_t kBlockK = kPackK;            // bf16 values of k per tile row (64 bytes)
constexpr int64_t kTileBytes = kPackTileBytes;  // one packed weight tile (kernels/tile_pack.h)
constexpr int64_t kPrefetch = 4096;   // decode: software prefetch distance in each weight stream
constexpr int64_t kChunkK = 16;       // batches: k blocks per pass over the accumulators (512)
constexpr int64_t kGroupBlocks = 16;  // batches: column blocks sharing one accumulator buffer

// LDTILECFG's 64-byte operand (palette 1): every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles: 0-3 accumulators, 4-5 activations (A), 5-7 weights (B; tile 5 is A's when two A tiles
// are in use). `rows`: the rows of the accumulators and of A tile 4 (16, or m for decode: fewer
// rows to load and multiply; row r of an accumulator reads only row r of A, so its arithmetic is
// the same in a tile of any height).
void ConfigureTiles(int64_t rows) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = static_cast<uint8_t>(t <= 4 ? rows : kTileRows);
  }
  _tile_loadconfig(&c);
}

struct AmxJob {
  const uint16_t* x;  // [mp, kp] bf16: rows past m and columns past k zero
  int64_t m, mp, kp;
  int64_t kb;               // k blocks (kp / 32)
  const uint8_t* packed;    // the packed matrix (block 0)
  int64_t block_bytes;      // kb * kTileBytes: one block of 16 weight rows
  int64_t row0;             // packed row of the view's row 0
  int64_t n;                // the view's rows: y's columns
  float* y;                 // [m, n]
};

// Copies one stored 16 x 16 accumulator tile (`c`, rows of 16 floats) into y: activation rows
// m0.. (those < m) and packed rows 16 b.. (those inside the view).
void CopyOut(const AmxJob& j, const float* c, int64_t m0, int64_t b) {
  const int64_t col0 = b * kTileRows - j.row0;  // y column of the tile's column 0
  const int64_t lo = std::max<int64_t>(0, -col0);
  const int64_t hi = std::min<int64_t>(kTileRows, j.n - col0);
  const int64_t rows = std::min<int64_t>(kTileRows, j.m - m0);
  if (lo == 0 && hi == kTileRows) {
    for (int64_t r = 0; r < rows; ++r) {
      _mm512_storeu_ps(j.y + (m0 + r) * j.n + col0, _mm512_load_ps(c + r * kTileRows));
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = lo; i < hi; ++i) j.y[(m0 + r) * j.n + col0 + i] = c[r * kTileRows + i];
  }
}

// One 16-row activation tile against NT (1..4) column blocks from block b, over all of k.
template <int NT>
void TileRow(const AmxJob& j, int64_t m0, int64_t b) {
  const uint16_t* a = j.x + m0 * j.kp;
  const int64_t lda = j.kp * 2;
  const uint8_t* w = j.packed + b * j.block_bytes;
  const int64_t bb = j.block_bytes;
  _tile_zero(0);
  if constexpr (NT > 1) _tile_zero(1);
  if constexpr (NT > 2) _tile_zero(2);
  if constexpr (NT > 3) _tile_zero(3);
  for (int64_t kk = 0; kk < j.kb; ++kk) {
    const uint8_t* t = w + kk * kTileBytes;
    for (int s = 0; s < NT; ++s) {
      for (int64_t l = 0; l < kTileBytes; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(t + s * bb + kPrefetch + l), _MM_HINT_T0);
      }
    }
    _tile_loadd(4, a + kk * kBlockK, lda);
    _tile_loadd(5, t, 64);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (NT > 1) {
      _tile_loadd(6, t + bb, 64);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (NT > 2) {
      _tile_loadd(7, t + 2 * bb, 64);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (NT > 3) {
      _tile_loadd(5, t + 3 * bb, 64);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  alignas(64) float c[4][kTileRows * kTileRows];
  _tile_stored(0, c[0], 64);
  if constexpr (NT > 1) _tile_stored(1, c[1], 64);
  if constexpr (NT > 2) _tile_stored(2, c[2], 64);
  if constexpr (NT > 3) _tile_stored(3, c[3], 64);
  for (int s = 0; s < NT; ++s) CopyOut(j, c[s], m0, b + s);
}

// Batches: accumulators for 16 or 32 activation rows from m0 (MT tiles) x NT (1..2) column
// blocks from block b (column `col` of `acc`, [mp, cols] f32), over k blocks [k0, k1): zeroed
// for the first k block, else loaded from `acc`; stored back to it. The f32 round trip is exact,
// so a row's sums are the ones the decode tiles (accumulators held over all of k) compute.
template <int MT, int NT>
void AccumulateTiles(const AmxJob& j, float* acc, int64_t cols, int64_t m0, int64_t b,
                     int64_t col, int64_t k0, int64_t k1) {
  const int64_t ldc = cols * 4;
  float* c0 = acc + m0 * cols + col;           // tile 0: rows m0.., block b
  float* c1 = c0 + kTileRows * cols;           // tile 1: rows m0 + 16.., block b
  float* c2 = c0 + kTileRows;                  // tile 2: rows m0.., block b + 1
  float* c3 = c1 + kTileRows;                  // tile 3: rows m0 + 16.., block b + 1
  if (k0 == 0) {
    _tile_zero(0);
    if constexpr (MT > 1) _tile_zero(1);
    if constexpr (NT > 1) _tile_zero(2);
    if constexpr (MT > 1 && NT > 1) _tile_zero(3);
  } else {
    _tile_loadd(0, c0, ldc);
    if constexpr (MT > 1) _tile_loadd(1, c1, ldc);
    if constexpr (NT > 1) _tile_loadd(2, c2, ldc);
    if constexpr (MT > 1 && NT > 1) _tile_loadd(3, c3, ldc);
  }
  const uint16_t* a = j.x + m0 * j.kp;
  const uint16_t* a2 = a + kTileRows * j.kp;
  const int64_t lda = j.kp * 2;
  const uint8_t* w = j.packed + b * j.block_bytes;
  const int64_t bb = j.block_bytes;
  for (int64_t kk = k0; kk < k1; ++kk) {
    const uint8_t* t = w + kk * kTileBytes;
    _tile_loadd(4, a + kk * kBlockK, lda);
    if constexpr (MT > 1) _tile_loadd(5, a2 + kk * kBlockK, lda);
    _tile_loadd(6, t, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (MT > 1) _tile_dpbf16ps(1, 5, 6);
    if constexpr (NT > 1) {
      _tile_loadd(7, t + bb, 64);
      _tile_dpbf16ps(2, 4, 7);
      if constexpr (MT > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c0, ldc);
  if constexpr (MT > 1) _tile_stored(1, c1, ldc);
  if constexpr (NT > 1) _tile_stored(2, c2, ldc);
  if constexpr (MT > 1 && NT > 1) _tile_stored(3, c3, ldc);
}

// Batches: column blocks [b0, b1) (at most kGroupBlocks) for every activation row, k in chunks of
// kChunkK blocks: per chunk, each column pair's weights (2 x 16 KiB) are read once from memory
// and reused from L1 by every 32-row tile pair, whose activations stay in L2 (mp x 512 bf16);
// the accumulators ([mp, cols] f32, L2) carry the sums from chunk to chunk.
void BatchBlocks(const AmxJob& j, int64_t b0, int64_t b1) {
  const int64_t cols = (b1 - b0) * kTileRows;
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < j.mp * cols + 16) buffer.resize(j.mp * cols + 16);
  float* acc = buffer.data() + (16 - reinterpret_cast<uintptr_t>(buffer.data()) / 4 % 16) % 16;
  for (int64_t k0 = 0; k0 < j.kb; k0 += kChunkK) {
    const int64_t k1 = std::min(j.kb, k0 + kChunkK);
    for (int64_t b = b0; b < b1; b += 2) {
      const int64_t col = (b - b0) * kTileRows;
      const bool two = b + 1 < b1;
      for (int64_t m0 = 0; m0 < j.mp; m0 += 2 * kTileRows) {
        if (m0 + kTileRows < j.mp) {
          two ? AccumulateTiles<2, 2>(j, acc, cols, m0, b, col, k0, k1)
              : AccumulateTiles<2, 1>(j, acc, cols, m0, b, col, k0, k1);
        } else {
          two ? AccumulateTiles<1, 2>(j, acc, cols, m0, b, col, k0, k1)
              : AccumulateTiles<1, 1>(j, acc, cols, m0, b, col, k0, k1);
        }
      }
    }
  }
  const int64_t first = std::max<int64_t>(b0 * kTileRows, j.row0);  // packed rows in the view
  const int64_t last = std::min<int64_t>(b1 * kTileRows, j.row0 + j.n);
  for (int64_t r = 0; r < j.m; ++r) {
    std::memcpy(j.y + r * j.n + (first - j.row0), acc + r * cols + (first - b0 * kTileRows),
                static_cast<size_t>(last - first) * sizeof(float));
  }
}

// Column blocks [b0, b1) (packed block indices) for every activation row.
void Blocks(const AmxJob& j, int64_t b0, int64_t b1) {
  if (j.mp == kTileRows) {  // decode: one activation tile of m rows, 4 weight streams at a time
    ConfigureTiles(j.m);
    int64_t b = b0;
    for (; b + 4 <= b1; b += 4) TileRow<4>(j, 0, b);
    switch (b1 - b) {
      case 3: TileRow<3>(j, 0, b); break;
      case 2: TileRow<2>(j, 0, b); break;
      case 1: TileRow<1>(j, 0, b); break;
      default: break;
    }
  } else {
    ConfigureTiles(kTileRows);
    for (int64_t g = b0; g < b1; g += kGroupBlocks) {
      BatchBlocks(j, g, std::min(b1, g + kGroupBlocks));
    }
  }
  _tile_release();
}

// x [m, k] f32 -> out [mp, kp] bf16 (avx512::RoundRowsPadded: round to nearest even, NaN stays
// NaN, zero past k), and zero past m when mp > 16.
void RoundRows(const float* x, int64_t m, int64_t k, int64_t mp, int64_t kp, uint16_t* out) {
  avx512::RoundRowsPadded(x, m, k, kp, out);
  if (mp > kTileRows) {  // batches: whole 16-row tiles (decode tiles have m rows)
    std::memset(out + m * kp, 0, static_cast<size_t>((mp - m) * kp) * sizeof(uint16_t));
  }
}

// y[m, n] = bf16(x)[m, k] . W[n, k]^T from w's packed copy.
void LinearPacked(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  AmxJob j;
  j.kb = (w.k + kBlockK - 1) / kBlockK;
  j.kp = j.kb * kBlockK;
  j.m = m;
  j.mp = (m + kTileRows - 1) / kTileRows * kTileRows;
  thread_local std::vector<uint16_t> xb;
  if (static_cast<int64_t>(xb.size()) < j.mp * j.kp) xb.resize(j.mp * j.kp);
  RoundRows(x, m, w.k, j.mp, j.kp, xb.data());
  j.x = xb.data();
  j.packed = static_cast<const uint8_t*>(w.packed);
  j.block_bytes = j.kb * kTileBytes;
  j.row0 = w.packed_row0;
  j.n = w.n;
  j.y = y;
  ForEachPackedBlockRange(w, m, [&j](int64_t b0, int64_t b1) { Blocks(j, b0, b1); });
}

}  // namespace

void FillAmxLinear(KernelTable& t) {
  UseTilePackedLinear<LinearPacked, avx512::TilePackAvx512>(t);
}

}  // namespace latent::kernels::amx
LATENT_AMX_END
