// W8A8 linear (`--quantize w8a8`) on AVX512-VNNI vpdpbusd over a packed copy of the int8 weights
// that the loader makes once (this table's pack): the layout of the bf16 packed kernel
// (kernels/tile_pack.h) with 4 int8 values of k where that has a bf16 pair, which is also the
// layout of AMX's TDPBUSD B tiles,
//
//   packed [ceil(n / 16) blocks][ceil(k / 64) tiles][16 k-quads][16 rows][4 int8]  (0 past n, k)
//
// so that one k-quad of a block's 16 rows is one 64-byte line and
//
//   acc[r][b] (16 outputs of activation row r) = vpdpbusd(acc, broadcast(u8 x[r] quad p), line p)
//
// needs no horizontal sum: the kernel over the rows as stored (linear_w8a8_vnni.cc) ends every
// tile's 24 accumulators with a lane reduction and reached 0.40 of vpdpbusd's rate on prefill
// shapes, against the bf16 packed kernel's 0.90 of vdpbf16ps's (Zen 4, one thread).
//
// The math is that kernel's: activations u8 = xq + 128 (quantize_u8.h), so each int32 lane sums
// (xq + 128) * q exactly (|sum| < 2^31 for k < 65,000), and the call's finish
// (w8a8_packed_call.h) applies the reference's formula.
//
// Integer sums are exact in any order: the blocking, the k chunks and the thread split never
// change a result, which equals the reference bit for bit and is batch invariant.
//
// Blocking as in linear_bf16_packed.cc (avx512/packed_blocks.h), with the int32 sums in the
// buffer between k chunks. Threads split N into groups of whole column blocks.
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/activation_rows.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/vnni_target.h"
#include "kernels/kernel_table.h"
#include "kernels/ref/linear_w8a8_ref.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

namespace latent::kernels::avx512 {

int64_t W8A8VnniPackedBytes(const WeightRef& w) {
  if (!IsW8A8(w) || w.n <= 0 || w.k <= 0) return 0;
  return (w.n + kPackRows - 1) / kPackRows * ((w.k + kW8A8PackK - 1) / kW8A8PackK) * kPackTileBytes;
}

// Plain C++ (the layout's definition; packing is load-time work): one 4-byte k-quad of a row at a
// time, each block's bytes zeroed first for the ends of n and k.
void W8A8VnniPack(const WeightRef& w, void* out) {
  const int64_t n = w.n, k = w.k;
  const int64_t tiles = (k + kW8A8PackK - 1) / kW8A8PackK, block_bytes = tiles * kPackTileBytes;
  const auto* q = static_cast<const uint8_t*>(w.data);  // [n, k] int8
  auto* packed = static_cast<uint8_t*>(out);
  threads::ParallelFor((n + kPackRows - 1) / kPackRows, 4, [&](int64_t b0, int64_t b1) {
    std::memset(packed + b0 * block_bytes, 0, static_cast<size_t>((b1 - b0) * block_bytes));
    for (int64_t b = b0; b < b1; ++b) {
      uint8_t* block = packed + b * block_bytes;
      for (int64_t r = 0; r < kPackRows && b * kPackRows + r < n; ++r) {
        const uint8_t* row = q + (b * kPackRows + r) * k;
        for (int64_t c = 0; c < k; c += 4) {  // quad c / 4: tile c / 64, line (c % 64) / 4
          std::memcpy(block + c / kW8A8PackK * kPackTileBytes + (c % kW8A8PackK) / 4 * 64 + 4 * r,
                      row + c, static_cast<size_t>(std::min<int64_t>(4, k - c)));
        }
      }
    }
  });
}

}  // namespace latent::kernels::avx512

LATENT_VNNI_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/packed_blocks.h"
#include "kernels/avx512/quantize_u8.h"
#include "kernels/avx512/w8a8_packed_call.h"

namespace latent::kernels::avx512 {
namespace {

// acc + u8 a . s8 b (vpdpbusd) in place. GCC 12 kept a 6 x 4 tile's accumulators apart from the
// instruction's tied destination and moved each through another register at every step (a
// register move per vpdpbusd, spills besides: 0.44 of vpdpbusd's rate); the asm ties them.
inline __m512i DotAccumulate(__m512i acc, __m512i a, __m512i b) {
#if defined(LATENT_EMULATE_AVX512)
  return _mm512_dpbusd_epi32(acc, a, b);
#else
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
#endif
}

using Job = W8A8PackedCall;

// MR activation rows from m0 x NB column blocks from b, over k tiles [t0, t1). acc: [MR rows of
// ld int32], column 16 s for block b + s; zeroed first when t0 == 0, else loaded, then stored.
template <int MR, int NB>
void Tile(const Job& j, int64_t m0, int64_t b, int64_t t0, int64_t t1, int32_t* acc, int64_t ld) {
  __m512i c[MR][NB];
  for (int r = 0; r < MR; ++r) {
    for (int s = 0; s < NB; ++s) {
      c[r][s] = t0 == 0 ? _mm512_setzero_si512() : _mm512_loadu_si512(acc + r * ld + s * kPackRows);
    }
  }
  const uint8_t* w[NB];
  for (int s = 0; s < NB; ++s) w[s] = j.packed + (b + s) * j.block_bytes;
  const uint8_t* x = j.x + m0 * j.kp;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t at = t * kPackTileBytes;
    for (int64_t p = 0; p < kPackRows; ++p) {
      __m512i line[NB];
      for (int s = 0; s < NB; ++s) line[s] = _mm512_load_si512(w[s] + at + p * 64);
      for (int r = 0; r < MR; ++r) {
        int32_t quad;
        std::memcpy(&quad, x + r * j.kp + t * kW8A8PackK + 4 * p, 4);
        const __m512i a = _mm512_set1_epi32(quad);
        for (int s = 0; s < NB; ++s) c[r][s] = DotAccumulate(c[r][s], a, line[s]);
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int s = 0; s < NB; ++s) _mm512_storeu_si512(acc + r * ld + s * kPackRows, c[r][s]);
  }
}

// Column blocks [b0, b1) for every activation row.
void Blocks(const Job& j, int64_t b0, int64_t b1) {
  PackedBlocks<int32_t>(
      j.m, j.tiles, b0, b1,
      [&j](int64_t m0, int64_t rows, int64_t b, int64_t blocks, int64_t t0, int64_t t1,
           int32_t* acc, int64_t ld) {
        WithTileShape(rows, blocks,
                      [&]<int MR, int NB>() { Tile<MR, NB>(j, m0, b, t0, t1, acc, ld); });
      },
      [&j](const int32_t* acc, int64_t ld, int64_t b, int64_t blocks) {
        FinishW8A8(j, acc, ld, 0, j.m, b, blocks);
      });
}

}  // namespace

void LinearW8A8VnniPacked(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  const Job j = MakeW8A8PackedCall(x, m, w, y, m, [](int64_t tiles) { return tiles; });
  ForEachPackedBlockRange(w, m, [&j](int64_t b0, int64_t b1) { Blocks(j, b0, b1); });
}

}  // namespace latent::kernels::avx512
LATENT_VNNI_END
