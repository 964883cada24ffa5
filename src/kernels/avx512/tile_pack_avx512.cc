// The load-time packing of kernels/tile_pack.h on AVX-512: the same bytes as the plain C++
// reference (TilePack, Fp8TilePack), a 1 KiB tile per 16 loads, 64 shuffles and 16 stores. The
// reference moves one 4-byte pair at a time from 16 row streams, and that made it most of a
// bf16 checkpoint's load time (about 0.85 GB/s per thread; the engine streams the result at
// tens of GB/s).
//
// A tile of a block is a 16 x 16 transpose of 4-byte elements: row j's 64 bytes of the tile
// (its 16 k-pairs) become element j of each of the 16 lines. Rows past n load as zeros and k past
// its end loads masked (zeros), so one path writes every tile, the ends included. fp8 codes use
// the same transpose on 4-byte pairs of pairs (rows of 32 codes, half a register), then one
// byte shuffle per 64 bytes puts each two lines' codes in the interleaved order of tile_pack.h.
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cstdint>

#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/tile_pack.h"
#include "threads/thread_pool.h"

LATENT_AVX512_BEGIN
namespace latent::kernels::avx512 {
namespace {

// The first `count` (<= 64) bytes.
inline __mmask64 ByteMask(int64_t count) {
  return count >= 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
}

// Packs w's rows (elements of kElem bytes) over the thread pool, block by block (kernels/
// tile_pack.h's layout); writes every byte of the packed copy.
template <int64_t kElem>
void PackTilesAvx512(const WeightRef& w, void* out) {
  constexpr int64_t kTileRowBytes = kPackK * kElem;  // a row's bytes in one tile: 64 or 32
  constexpr int64_t kTile = kPackRows * kTileRowBytes;
  const int64_t tiles = (w.k + kPackK - 1) / kPackK;
  const int64_t blocks = (w.n + kPackRows - 1) / kPackRows;
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t row_bytes = kElem * w.k;
  // Each two 32-byte lines of fp8 codes: lane L takes rows 4 L .. 4 L + 3 of the first line's
  // pair, then of the second's (the transposed 4-byte element holds both pairs of a row).
  const __m512i interleave = _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
  threads::ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t rows = std::min<int64_t>(kPackRows, w.n - b * kPackRows);
      const uint8_t* block_src = src + b * kPackRows * row_bytes;
      uint8_t* block = dst + b * tiles * kTile;
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t at = t * kTileRowBytes;  // the tile's first byte in a row
        const __mmask64 mask = ByteMask(row_bytes - at);
        __m512i r[16], line[16];
        for (int64_t j = 0; j < kPackRows; ++j) {
          if (j >= rows) {
            r[j] = _mm512_setzero_si512();
          } else if constexpr (kElem == 2) {
            r[j] = _mm512_maskz_loadu_epi8(mask, block_src + j * row_bytes + at);
          } else {
            r[j] = _mm512_zextsi256_si512(_mm256_maskz_loadu_epi8(
                static_cast<__mmask32>(mask), block_src + j * row_bytes + at));
          }
        }
        Transpose16x16(r, line);
        uint8_t* tile = block + t * kTile;
        if constexpr (kElem == 2) {
          for (int p = 0; p < 16; ++p) _mm512_storeu_si512(tile + 64 * p, line[p]);
        } else {
          // Elements 0..7 only (a row's 32 codes); element q holds pairs 2 q and 2 q + 1.
          for (int q = 0; q < 8; ++q) {
            _mm512_storeu_si512(tile + 64 * q, _mm512_shuffle_epi8(line[q], interleave));
          }
        }
      }
    }
  });
}

}  // namespace

void TilePackAvx512(const WeightRef& w, void* out) { PackTilesAvx512<2>(w, out); }
void Fp8TilePackAvx512(const WeightRef& w, void* out) { PackTilesAvx512<1>(w, out); }

}  // namespace latent::kernels::avx512
LATENT_AVX512_END
