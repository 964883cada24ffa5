// AVX-512 attention of one query token over L positions (kernels/attention.h).
//
// The positions are cut into segments whose size depends on L only; segments run in parallel,
// each with an online softmax over 64-row blocks (running max, rescaled partial sums), and are
// merged in segment order at the end. With a shared key/value head (absorbed MLA: head stride 0)
// the heads are processed 8 at a time against each row (register tiles of 8 heads x 3 rows for
// q.k and 8 heads x 48 columns for p.v), so a row is read once per 8 heads and not once per head.
// A token's result depends only on its own query and rows. bf16 rows are widened to f32 and fp8
// rows decoded as they are loaded (kernels/attention.h, avx512/row_loads_avx512.h): the same
// sums, bit for bit, as over the rows in f32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "kernels/attention.h"
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/attention_common.h"
#include "kernels/avx512/queries_common.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/row_loads_avx512.h"
#include "threads/thread_pool.h"

LATENT_AVX512_BEGIN
namespace latent::kernels::avx512 {
namespace {

constexpr int64_t kBlock = 64;  // rows per online-softmax step
constexpr int kGroup = 8;       // heads processed together

// The bytes of a key or value row (read by a row reader R of row_loads_avx512.h).
inline const uint8_t* Bytes(const void* row) { return static_cast<const uint8_t*>(row); }

// R shared key rows against the G (<= 8) heads of a group: p[g][i + r] = scale * q_g . key_r.
template <class L, int G, int R>  // L: the row reader
void ScoreRows(const AttentionArgs& a, const float* q, int64_t tb, int64_t i, float (*p)[kBlock],
               const void* const* next) {
  const int64_t d = a.qk_dim;
  const uint8_t* key[R];
  for (int r = 0; r < R; ++r) key[r] = Bytes(a.keys[tb + i + r]);
  __m512 acc[R][8];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < 8; ++g) acc[r][g] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= d; c += 16) {
    __m512 kv[R];
    for (int r = 0; r < R; ++r) kv[r] = L::Full(a.rows, key[r], c);
    // The rows after these, a cache line each step while the row lasts.
    if (const int64_t at = L::PrefetchAt(a.rows, c, d); next != nullptr && at >= 0) {
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(Bytes(next[r]) + at), _MM_HINT_T0);
    }
    for (int g = 0; g < G; ++g) {
      const __m512 qv = _mm512_loadu_ps(q + g * d + c);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_fmadd_ps(qv, kv[r], acc[r][g]);
    }
  }
  if (c < d) {
    const __mmask16 m = TailMask(d - c);
    __m512 kv[R];
    for (int r = 0; r < R; ++r) kv[r] = L::Part(a.rows, key[r], c, m);
    for (int g = 0; g < G; ++g) {
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + g * d + c);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_fmadd_ps(qv, kv[r], acc[r][g]);
    }
  }
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (int r = 0; r < R; ++r) {
    alignas(32) float sums[8];
    _mm256_store_ps(sums, _mm256_mul_ps(Reduce8(acc[r]), scale));
    for (int g = 0; g < G; ++g) p[g][i + r] = sums[g];
  }
}

// p[g][i] = scale * q[h0 + g] . key(tb + i, h0 + g) for the G (<= 8) heads of the group.
template <class L, int G>
void Scores(const AttentionArgs& a, int64_t h0, int64_t tb, int64_t rows, float (*p)[kBlock]) {
  const int64_t d = a.qk_dim;
  const float* q = a.q + h0 * d;
  if (a.key_head_stride == 0) {  // one shared key row for every head
    int64_t i = 0;
    for (; i + 3 <= rows; i += 3) {
      ScoreRows<L, G, 3>(a, q, tb, i, p, tb + i + 6 <= a.length ? a.keys + tb + i + 3 : nullptr);
    }
    for (; i < rows; ++i) ScoreRows<L, G, 1>(a, q, tb, i, p, nullptr);
    return;
  }
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* key = Bytes(a.keys[tb + i]);
    __m512 acc[8];
    for (int g = 0; g < 8; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += 16) {
      const __mmask16 m = TailMask(std::min<int64_t>(16, d - c));
      for (int g = 0; g < G; ++g) {
        acc[g] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + g * d + c),
                                 L::Part(a.rows, key, (h0 + g) * a.key_head_stride + c, m), acc[g]);
      }
    }
    alignas(32) float sums[8];
    _mm256_store_ps(sums, _mm256_mul_ps(Reduce8(acc), _mm256_set1_ps(a.scale)));
    for (int g = 0; g < G; ++g) p[g][i] = sums[g];
  }
}

// acc[g][c0 + 16 cc ...] += sum over i of p[g][i] * value(tb + i) for C chunks from column c0
// (the last one masked by `last`), shared value rows.
template <class L, int G, int C>
void ValueChunks(const AttentionArgs& a, int64_t tb, int64_t rows, float (*p)[kBlock],
                 float* acc_rows, int64_t c0, __mmask16 last) {
  const int64_t d = a.v_dim;
  __mmask16 mask[C];
  for (int cc = 0; cc < C; ++cc) mask[cc] = cc == C - 1 ? last : static_cast<__mmask16>(0xffff);
  __m512 acc[G][C];
  for (int g = 0; g < G; ++g)
    for (int cc = 0; cc < C; ++cc)
      acc[g][cc] = _mm512_maskz_loadu_ps(mask[cc], acc_rows + g * d + c0 + cc * 16);
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* v = Bytes(a.values[tb + i]);
    __m512 vv[C];
    for (int cc = 0; cc < C; ++cc) vv[cc] = L::Part(a.rows, v, c0 + cc * 16, mask[cc]);
    for (int g = 0; g < G; ++g) {
      const __m512 pb = _mm512_set1_ps(p[g][i]);
      for (int cc = 0; cc < C; ++cc) acc[g][cc] = _mm512_fmadd_ps(pb, vv[cc], acc[g][cc]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int cc = 0; cc < C; ++cc)
      _mm512_mask_storeu_ps(acc_rows + g * d + c0 + cc * 16, mask[cc], acc[g][cc]);
}

// Per-head value rows: C chunks of head g from column c0.
template <class L, int C>
void HeadValueChunks(const AttentionArgs& a, int64_t head, int64_t tb, int64_t rows, const float* p,
                     float* acc_row, int64_t c0, __mmask16 last) {
  __mmask16 mask[C];
  for (int cc = 0; cc < C; ++cc) mask[cc] = cc == C - 1 ? last : static_cast<__mmask16>(0xffff);
  __m512 acc[C];
  for (int cc = 0; cc < C; ++cc) acc[cc] = _mm512_maskz_loadu_ps(mask[cc], acc_row + c0 + cc * 16);
  const int64_t offset = head * a.value_head_stride + c0;
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* v = Bytes(a.values[tb + i]);
    const __m512 pb = _mm512_set1_ps(p[i]);
    for (int cc = 0; cc < C; ++cc) {
      acc[cc] = _mm512_fmadd_ps(pb, L::Part(a.rows, v, offset + cc * 16, mask[cc]), acc[cc]);
    }
  }
  for (int cc = 0; cc < C; ++cc) _mm512_mask_storeu_ps(acc_row + c0 + cc * 16, mask[cc], acc[cc]);
}

// acc[g] += sum over i of p[g][i] * value(tb + i, h0 + g); acc rows are v_dim floats apart.
template <class L, int G>
void Values(const AttentionArgs& a, int64_t h0, int64_t tb, int64_t rows, float (*p)[kBlock],
            float* acc_rows) {
  const int64_t d = a.v_dim;
  const int64_t full = d / 16;
  const __mmask16 tail = TailMask(d - full * 16);
  const __mmask16 all = 0xffff;
  if (a.value_head_stride == 0) {
    int64_t c = 0;
    for (; c + 3 <= full; c += 3) ValueChunks<L, G, 3>(a, tb, rows, p, acc_rows, c * 16, all);
    for (; c < full; ++c) ValueChunks<L, G, 1>(a, tb, rows, p, acc_rows, c * 16, all);
    if (tail != 0) ValueChunks<L, G, 1>(a, tb, rows, p, acc_rows, full * 16, tail);
    return;
  }
  for (int g = 0; g < G; ++g) {
    float* acc = acc_rows + g * d;
    int64_t c = 0;
    for (; c + 8 <= full; c += 8) HeadValueChunks<L, 8>(a, h0 + g, tb, rows, p[g], acc, c * 16, all);
    for (; c + 4 <= full; c += 4) HeadValueChunks<L, 4>(a, h0 + g, tb, rows, p[g], acc, c * 16, all);
    for (; c < full; ++c) HeadValueChunks<L, 1>(a, h0 + g, tb, rows, p[g], acc, c * 16, all);
    if (tail != 0) HeadValueChunks<L, 1>(a, h0 + g, tb, rows, p[g], acc, full * 16, tail);
  }
}

// One block of rows [tb, tb + rows) for heads [h0, h0 + G): updates the running max `mx`, sum
// `sum` and unnormalised acc[g] = sum of exp(s - mx) * v (acc_rows: G rows of v_dim floats).
template <class L, int G>
void BlockGroup(const AttentionArgs& a, int64_t h0, int64_t tb, int64_t rows, float* mx, float* sum,
                float* acc_rows) {
  alignas(64) float p[kGroup][kBlock];
  Scores<L, G>(a, h0, tb, rows, p);
  for (int g = 0; g < G; ++g) {
    __m512 bm = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < rows; i += 16) {
      const __mmask16 m = TailMask(std::min<int64_t>(16, rows - i));
      bm = _mm512_mask_max_ps(bm, m, bm, _mm512_loadu_ps(&p[g][i]));
    }
    const float block_max = ReduceMax(bm);
    if (block_max > mx[g]) {
      if (mx[g] != -INFINITY) {
        const float r = ExpScalar(mx[g] - block_max);
        ScaleRow(acc_rows + g * a.v_dim, a.v_dim, r);
        sum[g] *= r;
      }
      mx[g] = block_max;
    }
    // Every score so far -inf (keys with an -inf element): they weigh 0, as exp(-inf - 0) gives;
    // exp(-inf - -inf) would be NaN.
    const __m512 mv = _mm512_set1_ps(mx[g] == -INFINITY ? 0.0f : mx[g]);
    __m512 s = _mm512_setzero_ps();
    for (int64_t i = 0; i < rows; i += 16) {
      const __mmask16 m = TailMask(std::min<int64_t>(16, rows - i));
      const __m512 e = _mm512_maskz_mov_ps(m, Exp(_mm512_sub_ps(_mm512_loadu_ps(&p[g][i]), mv)));
      _mm512_store_ps(&p[g][i], e);
      s = _mm512_add_ps(s, e);
    }
    sum[g] += ReduceAdd(s);
  }
  Values<L, G>(a, h0, tb, rows, p, acc_rows);
}

using BlockGroupFn = void (*)(const AttentionArgs&, int64_t, int64_t, int64_t, float*, float*,
                              float*);
template <class L>
constexpr BlockGroupFn kBlockGroups[kGroup] = {BlockGroup<L, 1>, BlockGroup<L, 2>, BlockGroup<L, 3>,
                                               BlockGroup<L, 4>, BlockGroup<L, 5>, BlockGroup<L, 6>,
                                               BlockGroup<L, 7>, BlockGroup<L, 8>};

// Rows [t0, t1) for all heads: per head the running max, the sum and the unnormalised acc
// (acc: num_heads rows of v_dim floats). Blocks of rows outside, head groups inside, so a block
// is read from memory once and then from L1/L2 by the other groups.
void SegmentAllHeads(const AttentionArgs& a, int64_t t0, int64_t t1, float* mx, float* sum,
                     float* acc) {
  std::fill(mx, mx + a.num_heads, -INFINITY);
  std::fill(sum, sum + a.num_heads, 0.0f);
  std::fill(acc, acc + a.num_heads * a.v_dim, 0.0f);
  const BlockGroupFn* groups = a.rows.dtype == DType::kBF16     ? kBlockGroups<PlainRows<LoadBF16>>
                               : a.rows.dtype == DType::kF8E4M3 ? kBlockGroups<Fp8Rows>
                                                                : kBlockGroups<PlainRows<LoadF32>>;
  for (int64_t tb = t0; tb < t1; tb += kBlock) {
    const int64_t rows = std::min(kBlock, t1 - tb);
    for (int64_t h0 = 0; h0 < a.num_heads; h0 += kGroup) {
      const int g = static_cast<int>(std::min<int64_t>(kGroup, a.num_heads - h0));
      float* m = mx + h0;
      float* s = sum + h0;
      float* acc_rows = acc + h0 * a.v_dim;
      groups[g - 1](a, h0, tb, rows, m, s, acc_rows);
    }
  }
}

void Attention(const AttentionArgs& a) {
  // fp8 rows: one shared head, read in whole chunks (kernels/row_format.h).
  LATENT_CHECK(a.rows.dtype != DType::kF8E4M3 ||
               (RowsReadInPlace(a.rows) && a.key_head_stride == 0 && a.value_head_stride == 0));
  const int64_t h = a.num_heads, dv = a.v_dim;
  if (a.length <= 0) {
    std::fill(a.out, a.out + h * dv, 0.0f);
    return;
  }
  const int64_t seg_rows = SegmentRows(a.length);
  const int64_t segments = (a.length + seg_rows - 1) / seg_rows;
  // Per segment: max [h], sum [h], acc [h, dv]. Reused across calls on this thread.
  thread_local std::vector<float> work;
  if (segments == 1) {
    if (static_cast<int64_t>(work.size()) < 2 * h) work.resize(2 * h);
    float* stats = work.data();
    SegmentAllHeads(a, 0, a.length, stats, stats + h, a.out);
    for (int64_t i = 0; i < h; ++i)
      DivideRow(a.out + i * dv, dv, SinkDenominator(a.sinks, i, stats[i], stats[h + i]));
    return;
  }
  const int64_t per_segment = h * (dv + 2);
  if (static_cast<int64_t>(work.size()) < segments * per_segment)
    work.resize(segments * per_segment);
  float* base = work.data();
  threads::ParallelFor(segments, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      float* seg = base + s * per_segment;
      SegmentAllHeads(a, s * seg_rows, std::min(a.length, (s + 1) * seg_rows), seg, seg + h,
                      seg + 2 * h);
    }
  });
  MergeSegments(a, base, segments, per_segment);
}

// ---- attention_queries: several queries of one sequence (expanded-form prefill) ----
//
// Flash-attention style, per head and per tile of kQueryTile queries: the keys are packed once per
// call, transposed into blocks of kKeyBlock positions ([head][block][qk_dim][kKeyBlock]) (and the
// values per head, [head][position][v_dim]), so the scores of 4 queries x 64 positions are a
// register tile of 16 accumulators fed by one broadcast per query and 4 loads per qk column. Per
// query: each score is one f32 chain over the qk columns in order, times the scale; the blocks (of
// key indices from 0) in order from the one holding its start, each with an online softmax (running
// max; the sum of a block's exps in one fixed tree; the output rescaled when the max grows); p.v
// summed over the block's positions in order, vectorized over v columns. Positions before a query's
// start or at or past its length are masked out of its max, sum and p.v (not added as zeros), so a
// query's result depends only on its own query, start, length and rows: never on the other queries
// of its tile or call, nor on the thread.
constexpr int64_t kKeyBlock = kSoftmaxBlock;  // positions per block: 4 zmm of scores
static_assert(kQueriesBlockPositions % kKeyBlock == 0);
constexpr int64_t kQueryTile = kQueriesPerTask;
constexpr int kQs = 4;              // queries per register tile

// kt [key_heads][blocks][qk][kKeyBlock] (zero past the last position) from the key rows, and
// vt [value_heads][positions][v_dim] from the value rows: each head's values contiguous, so a
// block's p.v reads 64 consecutive rows instead of 64 rows of the whole expanded kv.
void Pack(const QueriesAttentionArgs& qa, int64_t positions, int64_t key_heads, int64_t value_heads,
          float* kt, float* vt) {
  const AttentionArgs& a = qa.shared;
  const int64_t dq = a.qk_dim, dv = a.v_dim, blocks = (positions + kKeyBlock - 1) / kKeyBlock;
  const int64_t heads = std::max(key_heads, value_heads);
  const DType dtype = a.rows.dtype;  // bf16 widens exactly; fp8 decodes as RowValue
  threads::ParallelFor(heads * blocks, 4, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t head = j / blocks, block = j % blocks;
      const int64_t t0 = block * kKeyBlock, rows = std::min(kKeyBlock, positions - t0);
      if (head < key_heads) {
        float* dst = kt + (head * blocks + block) * dq * kKeyBlock;
        if (rows < kKeyBlock) std::fill(dst, dst + dq * kKeyBlock, 0.0f);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t k0 = head * a.key_head_stride;
          if (dtype == DType::kBF16) {
            const uint16_t* key = static_cast<const uint16_t*>(a.keys[t0 + r]) + k0;
            for (int64_t c = 0; c < dq; ++c) dst[c * kKeyBlock + r] = BF16ToF32(key[c]);
          } else if (dtype == DType::kF8E4M3) {
            for (int64_t c = 0; c < dq; ++c)
              dst[c * kKeyBlock + r] = RowValue(a.rows, a.keys[t0 + r], k0 + c);
          } else {
            StridedKeyF32(qa, t0 + r, head, dst + r, kKeyBlock);
          }
        }
      }
      if (head < value_heads) {
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t v0 = head * a.value_head_stride;
          float* dst = vt + (head * positions + t0 + r) * dv;
          if (dtype == DType::kBF16) {
            const uint16_t* src = static_cast<const uint16_t*>(a.values[t0 + r]) + v0;
            for (int64_t c = 0; c < dv; ++c) dst[c] = BF16ToF32(src[c]);
          } else if (dtype == DType::kF8E4M3) {
            for (int64_t c = 0; c < dv; ++c) dst[c] = RowValue(a.rows, a.values[t0 + r], v0 + c);
          } else {
            const float* src = static_cast<const float*>(a.values[t0 + r]) + v0;
            std::copy(src, src + dv, dst);
          }
        }
      }
    }
  });
}

// s[q][0..64) = scale * q_q . key(t0 + r) for the QS queries, from the packed block.
template <int QS>
void BlockScores(const float* const* q, int64_t dq, const float* block, float scale,
                 float (*s)[kKeyBlock]) {
  __m512 acc[QS][4];
  for (int i = 0; i < QS; ++i)
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t c = 0; c < dq; ++c) {
    const float* col = block + c * kKeyBlock;
    __m512 kv[4];
    for (int v = 0; v < 4; ++v) kv[v] = _mm512_loadu_ps(col + 16 * v);
    for (int i = 0; i < QS; ++i) {
      const __m512 qb = _mm512_set1_ps(q[i][c]);
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_fmadd_ps(qb, kv[v], acc[i][v]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int i = 0; i < QS; ++i)
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(&s[i][16 * v], _mm512_mul_ps(acc[i][v], sc));
}

// o[q][c0..c0+16C) += sum over first[q] <= r < rows[q] of p[q][r] * value(t0 + r)[c0..], in
// order of r.
template <int QS, int C>
void BlockValues(const float* vt, int64_t dv, int64_t t0, int64_t rows_max, const int64_t* first,
                 const int64_t* rows, float (*p)[kKeyBlock], float* const* o, int64_t c0,
                 __mmask16 last) {
  __mmask16 mask[C];
  for (int cc = 0; cc < C; ++cc) mask[cc] = cc == C - 1 ? last : static_cast<__mmask16>(0xffff);
  __m512 acc[QS][C];
  for (int i = 0; i < QS; ++i)
    for (int cc = 0; cc < C; ++cc)
      acc[i][cc] = _mm512_maskz_loadu_ps(mask[cc], o[i] + c0 + 16 * cc);
  for (int64_t r = 0; r < rows_max; ++r) {
    const float* v = vt + (t0 + r) * dv + c0;
    __m512 vv[C];
    for (int cc = 0; cc < C; ++cc) vv[cc] = _mm512_maskz_loadu_ps(mask[cc], v + 16 * cc);
    for (int i = 0; i < QS; ++i) {
      const __mmask16 live = r >= first[i] && r < rows[i] ? static_cast<__mmask16>(0xffff) : 0;
      const __m512 pb = _mm512_set1_ps(p[i][r]);
      for (int cc = 0; cc < C; ++cc)
        acc[i][cc] = _mm512_mask3_fmadd_ps(pb, vv[cc], acc[i][cc], live);
    }
  }
  for (int i = 0; i < QS; ++i)
    for (int cc = 0; cc < C; ++cc) _mm512_mask_storeu_ps(o[i] + c0 + 16 * cc, mask[cc], acc[i][cc]);
}

template <int QS>
void BlockValuesAll(const float* vt, int64_t dv, int64_t t0, int64_t rows_max,
                    const int64_t* first, const int64_t* rows, float (*p)[kKeyBlock],
                    float* const* o) {
  const int64_t full = dv / 16;
  const __mmask16 all = 0xffff, tail = TailMask(dv - full * 16);
  int64_t c = 0;
  for (; c + 4 <= full; c += 4)
    BlockValues<QS, 4>(vt, dv, t0, rows_max, first, rows, p, o, c * 16, all);
  for (; c < full; ++c) BlockValues<QS, 1>(vt, dv, t0, rows_max, first, rows, p, o, c * 16, all);
  if (tail != 0)
    BlockValues<QS, 1>(vt, dv, t0, rows_max, first, rows, p, o, full * 16, tail);
}

// One register tile of QS queries (pointers q[i], lengths len[i], starts start[i] or none,
// state mx/sum/o) over block b.
template <int QS>
void QueryTileBlock(const AttentionArgs& a, const float* vt, const float* block, int64_t b,
                    const float* const* q, const int64_t* len, const int64_t* start, float* mx,
                    float* sum, float* const* o) {
  const int64_t t0 = b * kKeyBlock;
  int64_t first[QS], rows[QS];  // each query's positions [first, rows) of the block
  const int64_t rows_max = QueryBlockSpans(QS, len, start, t0, kKeyBlock, first, rows);
  if (rows_max == 0) return;  // none of the tile's queries attends this block
  alignas(64) float s[QS][kKeyBlock];
  BlockScores<QS>(q, a.qk_dim, block, a.scale, s);
  for (int i = 0; i < QS; ++i) {
    if (rows[i] > first[i])
      OnlineSoftmaxBlock(s[i], rows[i], &mx[i], &sum[i], o[i], a.v_dim, first[i]);
  }
  BlockValuesAll<QS>(vt, a.v_dim, t0, rows_max, first, rows, s, o);
}

using QueryTileBlockFn = void (*)(const AttentionArgs&, const float*, const float*, int64_t,
                                  const float* const*, const int64_t*, const int64_t*, float*,
                                  float*, float* const*);
constexpr QueryTileBlockFn kQueryTileBlocks[kQs] = {QueryTileBlock<1>, QueryTileBlock<2>,
                                                    QueryTileBlock<3>, QueryTileBlock<4>};

// Head `head`, queries [i0, i1) (at most kQueryTile).
// kt, vt: as Pack wrote them for `positions`.
void HeadQueries(const QueriesAttentionArgs& qa, const float* kt, const float* vt,
                 int64_t positions, int64_t head, int64_t i0, int64_t i1) {
  const AttentionArgs& a = qa.shared;
  const int64_t h = a.num_heads, dq = a.qk_dim, dv = a.v_dim;
  const int64_t blocks = (positions + kKeyBlock - 1) / kKeyBlock;
  const int64_t key_head = a.key_head_stride == 0 ? 0 : head;
  const float* vhead = vt + (a.value_head_stride == 0 ? 0 : head) * positions * dv;
  QueryTileState st(qa, i0, i1);
  const float* q[kQueryTile];
  for (int64_t i = i0; i < i1; ++i) q[i - i0] = qa.q + (i * h + head) * dq;
  st.ForEachBlockAndTile(i1 - i0, kQs, [&](int64_t b, int64_t j, int qs) {
    const float* block = kt + (key_head * blocks + b) * dq * kKeyBlock;
    kQueryTileBlocks[qs - 1](a, vhead, block, b, q + j, qa.lengths + i0 + j,
                             qa.starts == nullptr ? nullptr : qa.starts + i0 + j, st.mx + j,
                             st.sum + j, st.o + j);
  });
  WriteQueryOutputs(qa, head, i0, i1, st.o, st.mx, st.sum);
}

void AttentionQueries(const QueriesAttentionArgs& qa) {
  LATENT_CHECK(SharedKeysTaken(qa));
  const AttentionArgs& a = qa.shared;
  int64_t positions = 0;
  for (int64_t i = 0; i < qa.num_queries; ++i) positions = std::max(positions, qa.lengths[i]);
  const int64_t blocks = (positions + kKeyBlock - 1) / kKeyBlock;
  const int64_t key_heads = a.key_head_stride == 0 ? 1 : a.num_heads;
  const int64_t value_heads = a.value_head_stride == 0 ? 1 : a.num_heads;
  // [key_heads, blocks, qk, kKeyBlock], then [value_heads, positions, v_dim].
  thread_local std::vector<float> packed;
  const int64_t key_floats = key_heads * blocks * a.qk_dim * kKeyBlock;
  const int64_t floats = key_floats + value_heads * positions * a.v_dim;
  if (static_cast<int64_t>(packed.size()) < floats) packed.resize(floats);
  const float* kt = packed.data();
  const float* vt = packed.data() + key_floats;
  if (positions > 0)
    Pack(qa, positions, key_heads, value_heads, packed.data(), packed.data() + key_floats);
  ForEachHeadTile(qa, [&](int64_t head, int64_t i0, int64_t i1) {
    HeadQueries(qa, kt, vt, positions, head, i0, i1);
  });
}

}  // namespace

void FillAttentionKernel(KernelTable& t) {
  t.attention = Attention;
  t.attention_queries = AttentionQueries;
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_END
