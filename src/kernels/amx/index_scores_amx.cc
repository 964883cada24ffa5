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
#include "kernels/avx512/index_scores_common.h"
#include "kernels/amx/tile_blocks.h"
#include "kernels/amx/row_tiles.h"

namespace latent::kernels::amx {
namespace {

constexpr int64_t kHeadGroup = 16;  // heads per accumulator tile's columns
constexpr int64_t kGroupsAtOnce = 4;  // accumulator tiles per pass: 64 heads

void IndexScoresAmx(const IndexScoreArgs& a) {
  const int64_t hp = (a.heads + kHeadGroup - 1) / kHeadGroup * kHeadGroup;
  const int64_t groups = hp / kHeadGroup, dim_tiles = (a.dim + 31) / 32;
  // qt [dim_tiles * 16 pair rows][hp] and w [hp]: avx512::PackIndexQuery.
  thread_local std::vector<uint32_t> qt_buffer;
  thread_local std::vector<float> w_buffer, dots_buffer;
  thread_local std::vector<uint16_t> stage_buffer;
  uint32_t* qt = Aligned64(qt_buffer, dim_tiles * kTileRows * hp);
  float* w = Aligned64(w_buffer, hp);
  float* dots = Aligned64(dots_buffer, kTileRows * kGroupsAtOnce * kHeadGroup);
  uint16_t* stage = Aligned64(stage_buffer, kTileRows * StagedRowValues(dim_tiles));
  avx512::PackIndexQuery(a, hp, dim_tiles * kTileRows, qt, w);
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
      // dots [16 keys][64]: the keys against head groups [g0, g0 + g).
      const uint32_t* qg = qt + g0 * kHeadGroup;
      switch (g) {
        case 1: TileProducts<1>(keys, ld, qg, hp, dim_tiles, dots); break;
        case 2: TileProducts<2>(keys, ld, qg, hp, dim_tiles, dots); break;
        case 3: TileProducts<3>(keys, ld, qg, hp, dim_tiles, dots); break;
        default: TileProducts<4>(keys, ld, qg, hp, dim_tiles, dots); break;
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
