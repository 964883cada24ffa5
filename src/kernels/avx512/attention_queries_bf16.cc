// attention_queries under bf16 compute (QueriesAttentionArgs::bf16_products) on vdpbf16ps: the
// expanded form's prefill attention (causal or sliding-window) with q, keys, probabilities and
// values rounded to bf16 (round to nearest even) and every product summed in f32, as FlashAttention
// runs bf16 models. vdpbf16ps does two products per f32 lane, so this runs at twice the f32
// kernel's rate (attention_avx512.cc), on the same blocking:
//
//   scores  s[q][r] = scale * sum over k-pairs cp of vdpbf16ps(q pair cp, key r's pair cp)
//   values  o[q][c] += sum over position pairs rp of vdpbf16ps(p pair rp, value pair rp at c)
//
// with keys packed per block as [k-pairs][64 positions] of bf16 pairs and values as
// [position pairs][v_dim] of bf16 pairs. Each query's sums run in one fixed order (k-pairs in
// order; position pairs in order, blocks in order), and a pair outside its positions (before its
// start, past its length) is masked off, so a query's result depends only on its own query,
// start, length and rows: never on the other queries of its tile or call, nor on the thread, as
// the f32 kernel's.
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "kernels/attention.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/bf16_target.h"
#include "kernels/kernel_table.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

LATENT_AVX512_BF16_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/queries_common.h"
#include "kernels/avx512/queries_pack_bf16.h"

namespace latent::kernels::avx512 {
namespace {

constexpr int64_t kKeys = kSoftmaxBlock;  // positions per block: 4 zmm of scores
constexpr int64_t kQueryTile = kQueriesPerTask;
constexpr int kQs = 4;                    // queries per register tile

// s[i][0..64) = scale * q_i . key(t0 + r) for the QS queries (q pairs qp[i]), from the block.
template <int QS>
void BlockScores(const uint32_t* const* qp, int64_t pairs, const uint32_t* block, float scale,
                 float (*s)[kKeys]) {
  __m512 acc[QS][4];
  for (int i = 0; i < QS; ++i)
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t cp = 0; cp < pairs; ++cp) {
    const uint32_t* line = block + cp * kKeys;
    __m512bh kv[4];
    for (int v = 0; v < 4; ++v) kv[v] = (__m512bh)_mm512_loadu_si512(line + 16 * v);
    for (int i = 0; i < QS; ++i) {
      const __m512bh qb = (__m512bh)_mm512_set1_epi32(static_cast<int32_t>(qp[i][cp]));
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], qb, kv[v]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int i = 0; i < QS; ++i)
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(&s[i][16 * v], _mm512_mul_ps(acc[i][v], sc));
}

// One register tile of QS queries (q pairs qp[i], lengths len[i], starts start[i] or none,
// state mx/sum/o) over block b. vt: the head's value pairs.
template <int QS>
void QueryTileBlock(const AttentionArgs& a, const uint32_t* vt, const uint32_t* block, int64_t b,
                    const uint32_t* const* qp, const int64_t* len, const int64_t* start,
                    float* mx, float* sum, float* const* o) {
  const int64_t t0 = b * kKeys, pairs = (a.qk_dim + 1) / 2;
  int64_t first[QS], rows[QS];  // each query's positions [first, rows) of the block
  const int64_t rows_max = QueryBlockSpans(QS, len, start, t0, kKeys, first, rows);
  if (rows_max == 0) return;  // none of the tile's queries attends this block
  alignas(64) float s[QS][kKeys];
  BlockScores<QS>(qp, pairs, block, a.scale, s);
  alignas(64) uint32_t pp[QS][kKeys / 2];
  for (int i = 0; i < QS; ++i) {
    if (rows[i] <= first[i]) continue;
    OnlineSoftmaxBlock(s[i], rows[i], &mx[i], &sum[i], o[i], a.v_dim, first[i]);
    // The probabilities as bf16, in position order: pair rp holds positions 2 rp and 2 rp + 1.
    for (int v = 0; v < 2; ++v) {
      const __m512bh p = _mm512_cvtne2ps_pbh(_mm512_load_ps(&s[i][32 * v + 16]),
                                             _mm512_load_ps(&s[i][32 * v]));
      _mm512_store_si512(&pp[i][16 * v], (__m512i)p);
    }
  }
  BlockValuesAll<QS>(vt + t0 / 2 * a.v_dim, a.v_dim, (rows_max + 1) / 2, first, rows, pp, o);
}

using QueryTileBlockFn = void (*)(const AttentionArgs&, const uint32_t*, const uint32_t*, int64_t,
                                  const uint32_t* const*, const int64_t*, const int64_t*, float*,
                                  float*, float* const*);
constexpr QueryTileBlockFn kQueryTileBlocks[kQs] = {QueryTileBlock<1>, QueryTileBlock<2>,
                                                    QueryTileBlock<3>, QueryTileBlock<4>};

// Head `head`, queries [i0, i1) (at most kQueryTile); kt, vt as PackQueriesBf16 wrote them in
// layout l (unpadded: a line per k-pair, a row per position pair).
void HeadQueries(const QueriesAttentionArgs& qa, const PackedQueriesLayout& l, const uint32_t* kt,
                 const uint32_t* vt, int64_t head, int64_t i0, int64_t i1) {
  const AttentionArgs& a = qa.shared;
  const int64_t h = a.num_heads, dq = a.qk_dim, dv = a.v_dim, pairs = (dq + 1) / 2;
  const int64_t blocks = l.blocks;
  const int64_t key_head = a.key_head_stride == 0 ? 0 : head;
  const uint32_t* vhead = vt + (a.value_head_stride == 0 ? 0 : head) * l.value_pairs * dv;
  QueryTileState st(qa, i0, i1);
  thread_local std::vector<uint32_t> q_pairs;  // [kQueryTile, pairs]
  if (static_cast<int64_t>(q_pairs.size()) < kQueryTile * pairs) q_pairs.resize(kQueryTile * pairs);
  const uint32_t* qp[kQueryTile];
  for (int64_t i = i0; i < i1; ++i) {
    const float* q = qa.q + (i * h + head) * dq;
    uint32_t* pairs_of_q = q_pairs.data() + (i - i0) * pairs;
    for (int64_t cp0 = 0; cp0 < pairs; cp0 += 16) {
      _mm512_mask_storeu_epi32(pairs_of_q + cp0, TailMask(std::min<int64_t>(16, pairs - cp0)),
                               RowPairs16(DType::kF32, q, 2 * cp0, dq));
    }
    qp[i - i0] = pairs_of_q;
  }
  st.ForEachBlockAndTile(i1 - i0, kQs, [&](int64_t b, int64_t j, int qs) {
    const uint32_t* block = kt + (key_head * blocks + b) * l.key_lines * kKeys;
    kQueryTileBlocks[qs - 1](a, vhead, block, b, qp + j, qa.lengths + i0 + j,
                             qa.starts == nullptr ? nullptr : qa.starts + i0 + j, st.mx + j,
                             st.sum + j, st.o + j);
  });
  WriteQueryOutputs(qa, head, i0, i1, st.o, st.mx, st.sum);
}

void AttentionQueriesBf16(const QueriesAttentionArgs& qa) {
  const PackedQueriesLayout l(qa, 1, 1);  // a line per k-pair, a row per position pair
  // [key_heads, blocks, pairs, kKeys], then [value_heads, position pairs, v_dim].
  thread_local std::vector<uint32_t> packed;
  const int64_t key_words = l.key_words(), words = key_words + l.value_words();
  if (static_cast<int64_t>(packed.size()) < words) packed.resize(words);
  if (l.positions > 0) PackQueriesBf16(qa, l, packed.data(), packed.data() + key_words);
  // The calling thread's buffer, by pointer: inside the tasks `packed` would name each worker's.
  const uint32_t* kt = packed.data();
  const uint32_t* vt = packed.data() + key_words;
  ForEachHeadTile(qa, [&](int64_t head, int64_t i0, int64_t i1) {
    HeadQueries(qa, l, kt, vt, head, i0, i1);
  });
}

}  // namespace

bool Bf16TakesQueries(const QueriesAttentionArgs& qa) { return qa.bf16_products; }

void FillBf16AttentionQueries(KernelTable& t) {
  static void (*f32)(const QueriesAttentionArgs&) = nullptr;  // the table's kernel before
  f32 = t.attention_queries;
  t.attention_queries = [](const QueriesAttentionArgs& qa) {
    if (Bf16TakesQueries(qa)) {
      AttentionQueriesBf16(qa);
    } else {
      f32(qa);
    }
  };
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_BF16_END
