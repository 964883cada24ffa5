// The parts of the DSA indexer's scores (kernels/index_scores.h) that the f32 kernel
// (index_scores_avx512.cc), the bf16 one (index_scores_bf16.cc) and the AMX one
// (amx/index_scores_amx.cc) share: what a register tile does with its dot products, the walk
// over the head vectors that sums a key's score, and the bf16 kernels' packed query. Under the
// AVX-512 target pragma of avx512_common.h, with internal linkage: each includer's own copy.
#pragma once

#include <cstdint>

#include "kernels/avx512/avx512_common.h"
#include "kernels/index_scores.h"

LATENT_AVX512_BEGIN
namespace latent::kernels::avx512 {
namespace {

// The query of the bf16 kernels: qt [pair_rows][hp] bf16 pairs (row c2, lane h: head h's dims
// 2 c2 and 2 c2 + 1, rounded to nearest even; zero past dim / 2 rows and past the heads; the AMX
// kernel's B tiles as stored) and w [hp] the head weights, zero past the heads.
inline void PackIndexQuery(const IndexScoreArgs& a, int64_t hp, int64_t pair_rows, uint32_t* qt,
                           float* w) {
  std::fill(qt, qt + pair_rows * hp, 0u);
  std::fill(w, w + hp, 0.0f);
  for (int64_t h = 0; h < a.heads; ++h) {
    w[h] = a.w[h];
    for (int64_t c2 = 0; c2 < a.dim / 2; ++c2) {
      const float* q = a.q + h * a.dim + 2 * c2;
      qt[c2 * hp + h] = F32ToBF16(q[0]) | static_cast<uint32_t>(F32ToBF16(q[1])) << 16;
    }
  }
}

// total[j] += sum over the tile's HC head vectors (from head vector v0) of
// relu(scale * dot[j][v]) * w, in head-vector order.
template <int KJ, int HC>
inline void AddHeadScores(const __m512 (&dot)[KJ][HC], float scale, const float* w, int64_t v0,
                          __m512* total) {
  const __m512 s = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  for (int j = 0; j < KJ; ++j) {
    for (int v = 0; v < HC; ++v) {
      const __m512 r = _mm512_max_ps(_mm512_mul_ps(dot[j][v], s), zero);
      total[j] = _mm512_add_ps(total[j], _mm512_mul_ps(r, _mm512_loadu_ps(w + (v0 + v) * 16)));
    }
  }
}

// a.scores[j0 .. j0 + KJ): per key, the head vectors (hp / 16 of them) in tiles of kMost, then
// single ones, tile.template operator()<HC>(v0, total) adding each tile's head scores to total;
// then each key's lanes summed. A key's score depends on that key and the query only.
template <int KJ, int kMost, class F>
inline void SumKeyScores(const IndexScoreArgs& a, int64_t hp, int64_t j0, F&& tile) {
  __m512 total[KJ];
  for (int j = 0; j < KJ; ++j) total[j] = _mm512_setzero_ps();
  const int64_t vectors = hp / 16;
  int64_t v0 = 0;
  for (; v0 + kMost <= vectors; v0 += kMost) tile.template operator()<kMost>(v0, total);
  for (; v0 < vectors; ++v0) tile.template operator()<1>(v0, total);
  for (int j = 0; j < KJ; ++j) a.scores[j0 + j] = ReduceAdd(total[j]);
}

}  // namespace
}  // namespace latent::kernels::avx512
LATENT_AVX512_END
