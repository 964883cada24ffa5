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
// Blocking (avx512/packed_blocks.h): register tiles of up to 6 activation rows x 4 column
// blocks, decode over all of k in registers, batches in k chunks with an f32 buffer [m, 64]
// between them. Threads split N into groups of whole column blocks.
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
#include "kernels/avx512/packed_blocks.h"

namespace latent::kernels::avx512 {
namespace {

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

// Column blocks [b0, b1) for every activation row.
void Blocks(const PackedJob& j, int64_t b0, int64_t b1) {
  PackedBlocks<float>(
      j.m, j.tiles, b0, b1,
      [&j](int64_t m0, int64_t rows, int64_t b, int64_t blocks, int64_t t0, int64_t t1, float* acc,
           int64_t ld) {
        WithTileShape(rows, blocks,
                      [&]<int MR, int NB>() { Tile<MR, NB>(j, m0, b, t0, t1, acc, ld); });
      },
      [&j](const float* acc, int64_t ld, int64_t b, int64_t blocks) {
        CopyPackedOut(j, acc, ld, 0, j.m, b, blocks);
      });
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
