// attention_queries under bf16 compute (QueriesAttentionArgs::bf16_products) on AMX tiles: the
// expanded form's prefill attention (causal or sliding-window), FlashAttention's loop with both
// products on TDPBF16PS. Per task (one head, up to 64 queries: queries_common.h), per block of 64
// positions, per tile of 16 queries:
//
//   scores  S[16 queries][64 positions] = Q[16][dq] . K^T: 4 accumulator tiles of 16 positions,
//           one TDPBF16PS per 32 dims of dq, in order; then S *= scale
//   softmax each query's online-softmax step over its positions of the block (OnlineSoftmaxBlock,
//           as the vdpbf16ps kernel): its output rescaled, its probabilities P (0 outside its
//           positions: before its start, past its length)
//           rounded to bf16
//   values  O[16][c..c+16) += P[16][0..32) . V[0..32) then P[16][32..64) . V[32..64), per 16
//           columns of dv, the accumulator loaded from and stored to the query's f32 output row
//
// Keys and values are packed once per call by avx512/queries_pack_bf16.h, whose layouts are the
// B tiles as stored: a key tile is 16 k-pair lines x 16 positions (lines of 64 positions, 256
// bytes apart), a value tile 16 position pairs x 16 columns (rows dv pairs apart). The AMX layout
// pads the key lines to whole tiles of dq and the value rows to whole blocks, with zeros.
//
// Batch invariance: a tile's rows are independent (row r of a product reads only row r of A), and a
// query's arithmetic follows its own start and length alone: its scores, its softmax steps at the
// blocks it attends, for the blocks it attends whole the two value products of each column tile, in
// order, and for the blocks it attends in part the vector products below. A query of a tile that
// does not attend a block its neighbours attend (or only in part) keeps its output row out of the
// tile product (saved before it and put back: a product over zero probabilities could turn a -0 sum
// into +0). So its result does not depend on the other queries of its tile or call, nor on the
// thread, as in the vdpbf16ps kernel (but with other bits: the sums run in another order).
//
// A query's block that it attends only in part (its last, the diagonal; under a sliding window
// also its first) leaves the tile product: its probability row is zeroed there and its output row
// kept aside, then its values are added on vdpbf16ps over its own positions alone
// (avx512/queries_pack_bf16.h, BlockValues). A tile product would multiply its probabilities of 0
// outside its positions by the other queries' values, and an inf or NaN there would make its
// output NaN (0 times inf): now what reaches a query's sums depends on its own start and length
// alone, whatever the other positions of the call hold.
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "kernels/amx/amx_kernels.h"
#include "kernels/amx/amx_target.h"
#include "kernels/attention.h"
#include "kernels/kernel_table.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

LATENT_AMX_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/bf16_rows.h"
#include "kernels/avx512/queries_common.h"
#include "kernels/avx512/queries_pack_bf16.h"
#include "kernels/amx/tile_blocks.h"
#include "kernels/amx/row_tiles.h"
#include "kernels/amx/value_tiles.h"

namespace latent::kernels::amx {
namespace {

using avx512::kSoftmaxBlock;
constexpr int64_t kKeys = kSoftmaxBlock;                 // positions per block: 4 score tiles
constexpr int64_t kQueryTile = kTileRows;                // queries per tile
constexpr int64_t kTaskQueries = avx512::kQueriesPerTask;  // queries per task: 4 tiles
static_assert(kTaskQueries % kQueryTile == 0);

// Head `head`, queries [i0, i1) (at most kTaskQueries); kt, vt as PackQueriesBf16 wrote them in
// layout l (key lines in whole tiles, value rows in whole blocks).
void HeadQueriesAmx(const QueriesAttentionArgs& qa, const avx512::PackedQueriesLayout& l,
                    const uint32_t* kt, const uint32_t* vt, int64_t head, int64_t i0, int64_t i1) {
  const AttentionArgs& a = qa.shared;
  const int64_t h = a.num_heads, dq = a.qk_dim, dv = a.v_dim;
  const int64_t nq = i1 - i0, tiles = (nq + kQueryTile - 1) / kQueryTile;
  const int64_t dq_tiles = l.key_lines / kTileRows;
  const int64_t q_ld = TileActivationRowTiles(dq_tiles) * kTileRowBytes;  // bytes per query row
  const uint32_t* keys = kt + (a.key_head_stride == 0 ? 0 : head) * l.blocks * l.key_lines * kKeys;
  const uint32_t* values = vt + (a.value_head_stride == 0 ? 0 : head) * l.value_pairs * dv;
  avx512::QueryTileState st(qa, i0, i1);  // o: [nq rows of dv] in one buffer
  float* o = st.o[0];

  // The queries as bf16 rows of whole tiles (zero past dq), and zero rows past nq.
  thread_local std::vector<uint16_t> q_buffer;
  uint16_t* q = Aligned64(q_buffer, tiles * kQueryTile * q_ld / 2);
  for (int64_t i = 0; i < tiles * kQueryTile; ++i) {
    uint16_t* row = q + i * q_ld / 2;
    if (i < nq) {
      avx512::RoundRowsPadded(qa.q + ((i0 + i) * h + head) * dq, 1, dq, q_ld / 2, row);
    } else {
      std::memset(row, 0, q_ld);
    }
  }
  thread_local std::vector<float> s_buffer, saved_buffer;
  thread_local std::vector<uint16_t> p_buffer;
  thread_local std::vector<uint32_t> part_buffer;
  float* s = Aligned64(s_buffer, kQueryTile * kKeys);              // [16][64] scores
  uint16_t* p = Aligned64(p_buffer, kQueryTile * kKeys);           // [16][64] bf16 probabilities
  float* saved = Aligned64(saved_buffer, kQueryTile * dv);         // rows kept out of a product
  auto* part = reinterpret_cast<uint32_t (*)[kKeys / 2]>(           // [16][32] their pairs, for
      Aligned64(part_buffer, kQueryTile * kKeys / 2));            // the rows attending in part

  const __m512 scale = _mm512_set1_ps(a.scale);
  ConfigureTiles(kTileRows);
  for (int64_t b = st.first_block; b * kKeys < st.longest; ++b) {
    const int64_t t0 = b * kKeys;
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t j0 = tile * kQueryTile;
      // Each query's positions [first, rows) of the block (none past nq).
      int64_t first[kQueryTile] = {}, rows[kQueryTile] = {};
      const int64_t real = std::min(kQueryTile, nq - j0);
      const bool any = QueryBlockSpans(real, qa.lengths + i0 + j0,
                                       qa.starts == nullptr ? nullptr : qa.starts + i0 + j0, t0,
                                       kKeys, first, rows) > 0;
      if (!any) continue;
      bool whole = false;  // any query attends all of it: a tile product
      for (int64_t r = 0; r < real; ++r) whole = whole || (first[r] == 0 && rows[r] == kKeys);
      // S[16][64] = Q . K^T: B tiles of 16 k-pair lines, each of the block's 64 positions.
      TileProducts<4>(reinterpret_cast<const uint8_t*>(q) + j0 * q_ld, q_ld,
                      keys + b * l.key_lines * kKeys, kKeys, dq_tiles, s);
      for (int64_t r = 0; r < kQueryTile; ++r) {
        float* sr = s + r * kKeys;
        uint16_t* pr = p + r * kKeys;
        const bool attends = rows[r] > first[r];
        if (attends) {
          for (int64_t c = 0; c < kKeys; c += 16) {
            _mm512_store_ps(sr + c, _mm512_mul_ps(_mm512_load_ps(sr + c), scale));
          }
          avx512::OnlineSoftmaxBlock(sr, rows[r], &st.mx[j0 + r], &st.sum[j0 + r],
                                     o + (j0 + r) * dv, dv, first[r]);
          for (int64_t c = 0; c < kKeys; c += 32) {  // position order: the pairs V's rows hold
            _mm512_store_si512(pr + c, (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(sr + c + 16),
                                                                   _mm512_load_ps(sr + c)));
          }
        }
        if (first[r] == 0 && rows[r] == kKeys) continue;  // the whole block: the tile product
        if (attends) std::memcpy(part[r], pr, sizeof(part[r]));
        if (!whole) continue;  // no tile product: nothing to keep this row out of
        std::memset(pr, 0, kKeys * sizeof(uint16_t));
        if (j0 + r < nq) std::memcpy(saved + r * dv, o + (j0 + r) * dv, dv * sizeof(float));
      }
      const uint32_t* v = values + t0 / 2 * dv;
      if (whole) {
        _tile_loadd(4, p, kKeys * 2);
        _tile_loadd(5, p + kKeys / 2, kKeys * 2);
        AddValueProducts(v, dv, o + j0 * dv);
      }
      for (int64_t r = 0; r < kQueryTile; ++r) {
        if ((first[r] == 0 && rows[r] == kKeys) || j0 + r >= nq) continue;
        float* row = o + (j0 + r) * dv;
        if (whole) std::memcpy(row, saved + r * dv, dv * sizeof(float));
        if (rows[r] <= first[r]) continue;
        avx512::BlockValuesAll<1>(v, dv, (rows[r] + 1) / 2, &first[r], &rows[r], &part[r], &row);
      }
    }
  }
  _tile_release();
  avx512::WriteQueryOutputs(qa, head, i0, i1, st.o, st.mx, st.sum);
}

}  // namespace

bool AmxTakesQueries(const QueriesAttentionArgs& qa) {
  constexpr int64_t kValueTileColumns = 16;  // f32 outputs per 64-byte accumulator row
  return qa.bf16_products && qa.shared.qk_dim > 0 && qa.shared.v_dim > 0 &&
         qa.shared.v_dim % kValueTileColumns == 0;
}

void AttentionQueriesAmx(const QueriesAttentionArgs& qa) {
  // Key lines in whole tiles of dq, value rows in whole blocks: every tile load stays inside.
  const avx512::PackedQueriesLayout l(qa, kTileRows, kKeys / 2);
  thread_local std::vector<uint32_t> packed;
  const int64_t key_words = l.key_words(), words = key_words + l.value_words();
  uint32_t* kt = Aligned64(packed, words);
  uint32_t* vt = kt + key_words;
  if (l.positions > 0) avx512::PackQueriesBf16(qa, l, kt, vt);
  // The calling thread's buffer, by pointer: inside the tasks `packed` would name each worker's.
  avx512::ForEachHeadTile(qa, [&](int64_t head, int64_t i0, int64_t i1) {
    HeadQueriesAmx(qa, l, kt, vt, head, i0, i1);
  });
}

void FillAmxAttentionQueries(KernelTable& t) {
  static void (*wrapped)(const QueriesAttentionArgs&) = nullptr;  // the table's kernel before
  wrapped = t.attention_queries;
  t.attention_queries = [](const QueriesAttentionArgs& qa) {
    if (AmxTakesQueries(qa)) {
      AttentionQueriesAmx(qa);
    } else {
      wrapped(qa);
    }
  };
}

}  // namespace latent::kernels::amx
LATENT_AMX_END
