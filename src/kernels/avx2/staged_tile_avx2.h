// The register tile of the AVX2 packed linears' batches (every fp8 batch,
// linear_fp8_packed_avx2.cc; bf16 batches of 24 rows or more, linear_bf16_packed_avx2.cc):
// activation rows against one column block's weights, widened once into an f32 stage that every
// row tile of the batch then reads. Include it after avx2_common.h (it opens its own target
// region).
//
// Why a stage: widening bf16 (a shift and a mask per 8 weights) or fp8 codes in the register tile
// repeats the work for every tile of rows, and on Zen 3 it cost the bf16 tile 0.87 of the FMA
// peak with the data in L1, against 0.98 for FMAs on f32 weights. Widened once per column block
// and k chunk, the cost spreads over the whole batch.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/avx2/rounded_rows_avx2.h"
#include "kernels/tile_pack.h"

LATENT_AVX2_BEGIN
namespace latent::kernels::avx2 {

// Activation layouts a staged tile reads: x[r][k] at x + r ldx + k (rows of RoundedRowsF32), or
// at x + k MR + r (a row tile of RoundedTilesF32: one stream).
enum class XLayout { kRows, kRowTiles };

// Continues each accumulator's chain over the stage's first `ks` values of k, the stage being
// [k][16] f32 (one column block's 16 weight rows per k): for row r and half block h (weight rows
// 8 h .. 8 h + 7), in k order,
//
//   c[r][h] = fma(x[r][k], stage[k][8 h .. 8 h + 7], c[r][h])
//
// x: the tile's rows from the stage's first k, laid out as kLayout says.
//
// The accumulators are named registers, not an array: GCC kept a 6-row array of them in
// registers but also stored all 12 to the stack on every k (3x slower).
template <int MR, XLayout kLayout>
inline __attribute__((always_inline)) void StagedKs(const float* x, int64_t ldx, const float* stage,
                                                    int64_t ks, __m256 (&c)[MR][2]) {
  static_assert(MR >= 1 && MR <= kStagedRows);
  // clang-format off
#define LATENT_STAGED_ROW(r)                                                     \
  __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();           \
  if constexpr (MR > r) { c##r##0 = c[r][0]; c##r##1 = c[r][1]; }
  LATENT_STAGED_ROW(0) LATENT_STAGED_ROW(1) LATENT_STAGED_ROW(2)
  LATENT_STAGED_ROW(3) LATENT_STAGED_ROW(4) LATENT_STAGED_ROW(5)
#undef LATENT_STAGED_ROW
  for (int64_t k = 0; k < ks; ++k) {
    const __m256 w0 = _mm256_load_ps(stage + k * kPackRows);
    const __m256 w1 = _mm256_load_ps(stage + k * kPackRows + 8);
#define LATENT_STAGED_STEP(r)                                                      \
    if constexpr (MR > r) {                                                        \
      const __m256 xr = InRegister(_mm256_broadcast_ss(                            \
          kLayout == XLayout::kRows ? x + r * ldx + k : x + k * MR + r));          \
      c##r##0 = _mm256_fmadd_ps(xr, w0, c##r##0);                                  \
      c##r##1 = _mm256_fmadd_ps(xr, w1, c##r##1);                                  \
    }
    LATENT_STAGED_STEP(0) LATENT_STAGED_STEP(1) LATENT_STAGED_STEP(2)
    LATENT_STAGED_STEP(3) LATENT_STAGED_STEP(4) LATENT_STAGED_STEP(5)
#undef LATENT_STAGED_STEP
  }
#define LATENT_STAGED_OUT(r) \
  if constexpr (MR > r) { c[r][0] = c##r##0; c[r][1] = c##r##1; }
  LATENT_STAGED_OUT(0) LATENT_STAGED_OUT(1) LATENT_STAGED_OUT(2)
  LATENT_STAGED_OUT(3) LATENT_STAGED_OUT(4) LATENT_STAGED_OUT(5)
#undef LATENT_STAGED_OUT
  // clang-format on
}

}  // namespace latent::kernels::avx2
LATENT_AVX2_END
