// DSA indexer scores (kernels/index_scores.h) on AMX tiles under IndexScoreArgs::bf16_products:
// the query rounded to bf16, the bf16 key rows read in place (row_tiles.h), each key's dot with
// each head on TDPBF16PS. Per 16 keys, per 4 groups of 16 heads: D[16 keys][16 heads] = K . Q^T,
// one product per 32 dims, in order, with Q^T packed once per call as the vdpbf16ps kernel packs
// it ([dim / 2][hp] bf16 pairs: its rows are B tiles as stored); then per key, as that kernel,
// relu(scale * dot) * w added over the head vectors in order and the 16 lanes summed. A tile's
// rows are independent: a key's score depends on the key and the query only, never on the run
// or the thread (the bits are not the vdpbf16ps kernel's: its dots sum in another order).
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/amx/amx_kernels.h"
#include "kernels/amx/amx_target.h"
#include "kernels/index_scores.h"
#include "kernels/kernel_table.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"

LATENT_AMX_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/bf16_rows.h"
#include "kernels/amx/tile_blocks.h"
#include "kernels/amx/row_tiles.h"

namespace latent::kernels::amx {
namespace {

constexpr int64_t kHeadGroup = 16;  // heads per accumulator tile's columns
constexpr int64_t kGroupsAtOnce = 4;  // accumulator tiles per pass: 64 heads

// dots [16 keys][64] f32 for head groups [g0, g0 + G): tiles 0..G-1, the keys in tile 4, the
// query in tiles 5-7 (5 again for the fourth group).
template <int G>
void DotTiles(const uint8_t* keys, int64_t ld, const uint32_t* qt, int64_t hp, int64_t g0,
              int64_t dim_tiles, float* dots) {
  _tile_zero(0);
  if constexpr (G > 1) _tile_zero(1);
  if constexpr (G > 2) _tile_zero(2);
  if constexpr (G > 3) _tile_zero(3);
  const int64_t q_ld = hp * 4;
  for (int64_t kk = 0; kk < dim_tiles; ++kk) {
    const uint32_t* q = qt + kk * kTileRows * hp + g0 * kHeadGroup;  // 16 pair rows
    _tile_loadd(4, keys + kk * kTileRowBytes, ld);
    _tile_loadd(5, q, q_ld);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (G > 1) {
      _tile_loadd(6, q + kHeadGroup, q_ld);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (G > 2) {
      _tile_loadd(7, q + 2 * kHeadGroup, q_ld);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (G > 3) {
      _tile_loadd(5, q + 3 * kHeadGroup, q_ld);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  constexpr int64_t ld_dots = kGroupsAtOnce * kHeadGroup * 4;
  _tile_stored(0, dots, ld_dots);
  if constexpr (G > 1) _tile_stored(1, dots + kHeadGroup, ld_dots);
  if constexpr (G > 2) _tile_stored(2, dots + 2 * kHeadGroup, ld_dots);
  if constexpr (G > 3) _tile_stored(3, dots + 3 * kHeadGroup, ld_dots);
}

void IndexScoresAmx(const IndexScoreArgs& a) {
  const int64_t hp = (a.heads + kHeadGroup - 1) / kHeadGroup * kHeadGroup;
  const int64_t groups = hp / kHeadGroup, dim_tiles = (a.dim + 31) / 32;
  // qt [dim_tiles * 16 pair rows][hp]: row c2, lane h = head h's dims 2 c2 and 2 c2 + 1 in bf16
  // (zero past the dim and past the heads); w [hp] the head weights, zero past the heads.
  thread_local std::vector<uint32_t> qt_buffer;
  thread_local std::vector<float> w_buffer, dots_buffer;
  thread_local std::vector<uint16_t> stage_buffer;
  uint32_t* qt = Aligned64(qt_buffer, dim_tiles * kTileRows * hp);
  float* w = Aligned64(w_buffer, hp);
  float* dots = Aligned64(dots_buffer, kTileRows * kGroupsAtOnce * kHeadGroup);
  uint16_t* stage = Aligned64(stage_buffer, kTileRows * StagedRowValues(dim_tiles));
  std::fill(qt, qt + dim_tiles * kTileRows * hp, 0u);
  std::fill(w, w + hp, 0.0f);
  for (int64_t h = 0; h < a.heads; ++h) {
    w[h] = a.w[h];
    for (int64_t c2 = 0; c2 < a.dim / 2; ++c2) {
      const float* q = a.q + h * a.dim + 2 * c2;
      qt[c2 * hp + h] = F32ToBF16(q[0]) | static_cast<uint32_t>(F32ToBF16(q[1])) << 16;
    }
  }
  const __m512 scale = _mm512_set1_ps(a.scale), zero = _mm512_setzero_ps();
  ConfigureTiles(kTileRows);
  for (int64_t j0 = 0; j0 < a.n; j0 += kTileRows) {
    const int64_t count = std::min(kTileRows, a.n - j0);
    int64_t ld = 0;
    const uint8_t* keys = RowsAsTiles(a.keys, j0, count, a.dim, dim_tiles, stage, &ld);
    __m512 total[kTileRows];
    for (int64_t j = 0; j < kTileRows; ++j) total[j] = zero;
    for (int64_t g0 = 0; g0 < groups; g0 += kGroupsAtOnce) {
      const int64_t g = std::min(kGroupsAtOnce, groups - g0);
      switch (g) {
        case 1: DotTiles<1>(keys, ld, qt, hp, g0, dim_tiles, dots); break;
        case 2: DotTiles<2>(keys, ld, qt, hp, g0, dim_tiles, dots); break;
        case 3: DotTiles<3>(keys, ld, qt, hp, g0, dim_tiles, dots); break;
        default: DotTiles<4>(keys, ld, qt, hp, g0, dim_tiles, dots); break;
      }
      for (int64_t j = 0; j < count; ++j) {
        for (int64_t v = 0; v < g; ++v) {  // head vectors in order, as AddHeadScores
          const __m512 dot = _mm512_load_ps(dots + j * kGroupsAtOnce * kHeadGroup + v * 16);
          const __m512 r = _mm512_max_ps(_mm512_mul_ps(dot, scale), zero);  // relu(NaN) = 0
          total[j] =
              _mm512_add_ps(total[j], _mm512_mul_ps(r, _mm512_load_ps(w + (g0 + v) * 16)));
        }
      }
    }
    for (int64_t j = 0; j < count; ++j) a.scores[j0 + j] = avx512::ReduceAdd(total[j]);
  }
  _tile_release();
}

}  // namespace

bool AmxTakesIndexScores(const IndexScoreArgs& a) {
  return a.bf16_products && a.rows.dtype == DType::kBF16 && a.dim > 0 && a.dim % 2 == 0;
}

void IndexScoresBf16Amx(const IndexScoreArgs& a) { IndexScoresAmx(a); }

void FillAmxIndexScores(KernelTable& t) {
  static void (*wrapped)(const IndexScoreArgs&) = nullptr;  // the table's kernel before
  wrapped = t.index_scores;
  t.index_scores = [](const IndexScoreArgs& a) {
    if (AmxTakesIndexScores(a)) {
      IndexScoresAmx(a);
    } else {
      wrapped(a);
    }
  };
}

}  // namespace latent::kernels::amx
LATENT_AMX_END
