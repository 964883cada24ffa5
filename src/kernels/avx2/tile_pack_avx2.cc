// The load-time packing of bf16 weights into kernels/tile_pack.h's layout on AVX2: the same bytes
// as the plain C++ reference (TilePack). A whole tile of a whole block is four 8 x 8 transposes of
// 4-byte pairs (rows 8 g .. 8 g + 7, k-pairs 8 q .. 8 q + 7 -> half a line each); the tiles holding
// the end of k or of n are written pair by pair, zeros past the ends. The reference moves one pair
// at a time from 16 row streams, which tripled a 2.3 GB checkpoint's load on a Zen 3.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/avx2/avx2_kernels.h"
#include "kernels/tile_pack.h"
#include "threads/thread_pool.h"
// Last: defines the AVX2 helpers under the target pragma.
#include "kernels/avx2/avx2_common.h"

LATENT_AVX2_BEGIN
namespace latent::kernels::avx2 {
namespace {

// r[i] (8 elements of 4 bytes, row i) -> r[p] = element p of every row, in row order.
inline void Transpose8x8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
    const __m256* u = t + 4 * h;
    s[4 * h + 0] = _mm256_shuffle_ps(u[0], u[2], 0x44);
    s[4 * h + 1] = _mm256_shuffle_ps(u[0], u[2], 0xEE);
    s[4 * h + 2] = _mm256_shuffle_ps(u[1], u[3], 0x44);
    s[4 * h + 3] = _mm256_shuffle_ps(u[1], u[3], 0xEE);
  }
  for (int p = 0; p < 4; ++p) {
    r[p] = _mm256_permute2f128_ps(s[p], s[4 + p], 0x20);
    r[p + 4] = _mm256_permute2f128_ps(s[p], s[4 + p], 0x31);
  }
}

// One tile of rows `rows` (< 16 past the end of n) over k values [c0, min(k, c0 + 32)): zeros,
// then pair by pair (the last pair may be half).
void PackTileScalar(const uint8_t* const* row, int64_t rows, int64_t k, int64_t c0,
                    uint8_t* tile) {
  std::memset(tile, 0, kPackTileBytes);
  const int64_t c1 = std::min(k, c0 + kPackK);
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t c = c0; c < c1; c += 2) {
      std::memcpy(tile + (c - c0) / 2 * 64 + j * 4, row[j] + 2 * c, c + 1 < c1 ? 4 : 2);
    }
  }
}

void PackBf16(const WeightRef& w, void* out) {
  const int64_t tiles = (w.k + kPackK - 1) / kPackK;
  const int64_t blocks = (w.n + kPackRows - 1) / kPackRows;
  const int64_t whole_tiles = w.k / kPackK;  // tiles with no k past the end
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t row_bytes = 2 * w.k;
  threads::ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t rows = std::min<int64_t>(kPackRows, w.n - b * kPackRows);
      const uint8_t* row[kPackRows];  // [16]: the block's rows (past n: none)
      for (int64_t j = 0; j < rows; ++j) row[j] = src + (b * kPackRows + j) * row_bytes;
      uint8_t* block = dst + b * tiles * kPackTileBytes;
      const int64_t fast_tiles = rows == kPackRows ? whole_tiles : 0;
      for (int64_t t = 0; t < fast_tiles; ++t) {
        uint8_t* tile = block + t * kPackTileBytes;
        for (int g = 0; g < 2; ++g) {    // rows 8 g .. 8 g + 7: bytes 32 g .. 32 g + 31 of a line
          for (int q = 0; q < 2; ++q) {  // k-pairs 8 q .. 8 q + 7: lines 8 q .. 8 q + 7
            __m256 r[8];
            for (int i = 0; i < 8; ++i) {
              r[i] = _mm256_loadu_ps(
                  reinterpret_cast<const float*>(row[8 * g + i] + t * 2 * kPackK + 32 * q));
            }
            Transpose8x8(r);
            for (int p = 0; p < 8; ++p) {
              _mm256_storeu_ps(reinterpret_cast<float*>(tile + (8 * q + p) * 64 + 32 * g), r[p]);
            }
          }
        }
      }
      for (int64_t t = fast_tiles; t < tiles; ++t) {
        PackTileScalar(row, rows, w.k, t * kPackK, block + t * kPackTileBytes);
      }
    }
  });
}

}  // namespace

void TilePackAvx2(const WeightRef& w, void* out) { PackBf16(w, out); }

}  // namespace latent::kernels::avx2
LATENT_AVX2_END
