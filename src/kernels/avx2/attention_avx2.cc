// AVX2 attention of one query token over L positions, and of several queries of one sequence,
// causal or sliding-window (kernels/attention.h): the AVX-512 kernels' structure with 8-lane
// vectors and register tiles that fit 16 ymm.
//
// attention: the positions are cut into segments whose size depends on L only; segments run in
// parallel, each with an online softmax over 64-row blocks (running max, rescaled partial sums),
// and are merged in segment order at the end. Heads go 8 at a time against each row (one key and
// value row read per 8 heads, not per head). Per head, each score is one f32x8 FMA chain over
// the qk columns in order, reduced in one fixed tree (Reduce8), so a token's result depends only
// on its own query and rows, never on the thread count. bf16 rows are widened to f32 and fp8 rows
// decoded as they are loaded (kernels/attention.h, avx2/row_loads_avx2.h): the same sums, bit for
// bit, as over the rows in f32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "kernels/attention.h"
#include "kernels/avx2/avx2_kernels.h"
#include "threads/thread_pool.h"
// Last: define the AVX2 helpers under the target pragma.
#include "kernels/avx2/avx2_common.h"
#include "kernels/avx2/row_loads_avx2.h"

LATENT_AVX2_BEGIN
namespace latent::kernels::avx2 {
namespace {

constexpr int64_t kBlock = 64;  // rows per online-softmax step
constexpr int kGroup = 8;       // heads processed together

// Rows per segment: a function of L only, so the arithmetic never depends on the thread count.
int64_t SegmentRows(int64_t length) {
  if (length <= 512) return std::max<int64_t>(length, 1);
  return std::max<int64_t>(512, ((length + 7) / 8 + 63) / 64 * 64);
}

// The bytes of a key or value row (read by a row reader L of row_loads_avx2.h).
inline const uint8_t* Bytes(const void* row) { return static_cast<const uint8_t*>(row); }

// `count` (<= 8) elements of a row from element c as f32: a full vector or the tail.
template <class L>
inline __m256 LoadRow(const RowFormat& f, const uint8_t* row, int64_t c, int64_t count) {
  return count >= 8 ? L::Full(f, row, c) : L::Part(f, row, c, count);
}

// p[g][i] = scale * q[h0 + g] . key(tb + i, h0 + g) for the G (<= 8) heads of the group; with a
// shared key head (stride 0) the key chunk is loaded once for all G heads.
template <class L, int G, bool kShared>
void Scores(const AttentionArgs& a, int64_t h0, int64_t tb, int64_t rows, float (*p)[kBlock]) {
  const int64_t d = a.qk_dim;
  const float* q = a.q + h0 * d;
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* key = Bytes(a.keys[tb + i]);
    const int64_t k0 = h0 * a.key_head_stride;
    if (kShared && i + 1 < rows) {
      _mm_prefetch(reinterpret_cast<const char*>(a.keys[tb + i + 1]), _MM_HINT_T0);
    }
    __m256 acc[8];
    for (int g = 0; g < 8; ++g) acc[g] = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= d; c += 8) {
      if constexpr (kShared) {
        const __m256 kv = L::Full(a.rows, key, c);
        for (int g = 0; g < G; ++g)
          acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * d + c), kv, acc[g]);
      } else {
        for (int g = 0; g < G; ++g) {
          acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * d + c),
                                   L::Full(a.rows, key, k0 + g * a.key_head_stride + c), acc[g]);
        }
      }
    }
    if (c < d) {
      for (int g = 0; g < G; ++g) {
        acc[g] = _mm256_fmadd_ps(LoadPart(q + g * d + c, d - c),
                                 L::Part(a.rows, key, k0 + g * a.key_head_stride + c, d - c),
                                 acc[g]);
      }
    }
    alignas(32) float sums[8];
    _mm256_store_ps(sums, _mm256_mul_ps(Reduce8(acc), scale));
    for (int g = 0; g < G; ++g) p[g][i] = sums[g];
  }
}

// acc_rows[g][c0 .. c0 + 8) += sum over i of p[g][i] * value(tb + i, head h0 + g), i in order;
// `count` (<= 8) columns.
template <class L, int G>
void SharedValueChunk(const AttentionArgs& a, int64_t tb, int64_t rows, float (*p)[kBlock],
                      float* acc_rows, int64_t c0, int64_t count) {
  const int64_t d = a.v_dim;
  __m256 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = LoadPart(acc_rows + g * d + c0, count);
  if (count == 8) {
    for (int64_t i = 0; i < rows; ++i) {
      const __m256 vv = L::Full(a.rows, Bytes(a.values[tb + i]), c0);
      for (int g = 0; g < G; ++g)
        acc[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][i]), vv, acc[g]);
    }
  } else {
    for (int64_t i = 0; i < rows; ++i) {
      const __m256 vv = L::Part(a.rows, Bytes(a.values[tb + i]), c0, count);
      for (int g = 0; g < G; ++g)
        acc[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][i]), vv, acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) StorePart(acc_rows + g * d + c0, count, acc[g]);
}

// Per-head value rows: C chunks of 8 columns of head `head` from column c0 (the last one
// `last` <= 8 columns wide).
template <class L, int C>
void HeadValueChunks(const AttentionArgs& a, int64_t head, int64_t tb, int64_t rows, const float* p,
                     float* acc_row, int64_t c0, int64_t last) {
  __m256 acc[C];
  for (int cc = 0; cc < C; ++cc)
    acc[cc] = LoadPart(acc_row + c0 + cc * 8, cc == C - 1 ? last : 8);
  const int64_t offset = head * a.value_head_stride + c0;
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* v = Bytes(a.values[tb + i]);
    const __m256 pb = _mm256_broadcast_ss(&p[i]);
    for (int cc = 0; cc < C; ++cc) {
      const __m256 vv = LoadRow<L>(a.rows, v, offset + cc * 8, cc == C - 1 ? last : 8);
      acc[cc] = _mm256_fmadd_ps(pb, vv, acc[cc]);
    }
  }
  for (int cc = 0; cc < C; ++cc) StorePart(acc_row + c0 + cc * 8, cc == C - 1 ? last : 8, acc[cc]);
}

// acc[g] += sum over i of p[g][i] * value(tb + i, h0 + g); acc rows are v_dim floats apart.
template <class L, int G>
void Values(const AttentionArgs& a, int64_t h0, int64_t tb, int64_t rows, float (*p)[kBlock],
            float* acc_rows) {
  const int64_t d = a.v_dim;
  if (a.value_head_stride == 0) {
    for (int64_t c = 0; c < d; c += 8)
      SharedValueChunk<L, G>(a, tb, rows, p, acc_rows, c, std::min<int64_t>(8, d - c));
    return;
  }
  const int64_t full = d / 8, rest = d - full * 8;
  for (int g = 0; g < G; ++g) {
    float* acc = acc_rows + g * d;
    int64_t c = 0;
    for (; c + 4 <= full; c += 4) HeadValueChunks<L, 4>(a, h0 + g, tb, rows, p[g], acc, c * 8, 8);
    for (; c < full; ++c) HeadValueChunks<L, 1>(a, h0 + g, tb, rows, p[g], acc, c * 8, 8);
    if (rest != 0) HeadValueChunks<L, 1>(a, h0 + g, tb, rows, p[g], acc, full * 8, rest);
  }
}

void ScaleRow(float* row, int64_t d, float factor) {
  const __m256 f = _mm256_set1_ps(factor);
  for (int64_t c = 0; c < d; c += 8) {
    const int64_t count = std::min<int64_t>(8, d - c);
    StorePart(row + c, count, _mm256_mul_ps(LoadPart(row + c, count), f));
  }
}

void DivideRow(float* row, int64_t d, float divisor) {
  const __m256 f = _mm256_set1_ps(divisor);
  for (int64_t c = 0; c < d; c += 8) {
    const int64_t count = std::min<int64_t>(8, d - c);
    StorePart(row + c, count, _mm256_div_ps(LoadPart(row + c, count), f));
  }
}

// Softmax step of one row of scores s[first, rows) (first < rows <= kBlock, s 32-byte aligned,
// room for a whole number of vectors): updates the running max `mx` (rescaling `acc` [d] and `sum`
// when it grows) and `sum`, and leaves exp(s - mx) in s (0 outside [first, rows)). first > 0: a
// sliding window's first block (the same sums as with first 0 where first is 0).
void SoftmaxStep(float* s, int64_t rows, float* mx, float* sum, float* acc, int64_t d,
                 int64_t first = 0) {
  // Lanes i .. i + 7 in [first, rows).
  const auto live_lanes = [first, rows](int64_t i) {
    return _mm256_castsi256_ps(
        _mm256_andnot_si256(TailMask(std::clamp<int64_t>(first - i, 0, 8)),
                            TailMask(std::clamp<int64_t>(rows - i, 0, 8))));
  };
  __m256 bm = _mm256_set1_ps(-INFINITY);
  for (int64_t i = first / 8 * 8; i < rows; i += 8) {
    const __m256 live = live_lanes(i);
    const __m256 v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_load_ps(s + i), live);
    bm = _mm256_max_ps(bm, v);
  }
  const float block_max = ReduceMax(bm);
  if (block_max > *mx) {
    if (*mx != -INFINITY) {
      const float r = ExpScalar(*mx - block_max);
      ScaleRow(acc, d, r);
      *sum *= r;
    }
    *mx = block_max;
  }
  // Every score so far -inf: they weigh 0 (exp(-inf - -inf) would be NaN).
  const __m256 mv = _mm256_set1_ps(*mx == -INFINITY ? 0.0f : *mx);
  __m256 total = _mm256_setzero_ps();
  for (int64_t i = 0; i < kBlock; i += 8) {
    const __m256 live = live_lanes(i);
    const __m256 e = _mm256_and_ps(live, Exp(_mm256_sub_ps(_mm256_load_ps(s + i), mv)));
    _mm256_store_ps(s + i, e);
    total = _mm256_add_ps(total, e);
  }
  *sum += ReduceAdd(total);
}

// One block of rows [tb, tb + rows) for heads [h0, h0 + G): updates the running max `mx`, sum
// `sum` and unnormalised acc[g] = sum of exp(s - mx) * v (acc_rows: G rows of v_dim floats).
template <class L, int G>
void BlockGroup(const AttentionArgs& a, int64_t h0, int64_t tb, int64_t rows, float* mx, float* sum,
                float* acc_rows) {
  alignas(32) float p[kGroup][kBlock];
  if (a.key_head_stride == 0) {
    Scores<L, G, true>(a, h0, tb, rows, p);
  } else {
    Scores<L, G, false>(a, h0, tb, rows, p);
  }
  for (int g = 0; g < G; ++g)
    SoftmaxStep(p[g], rows, &mx[g], &sum[g], acc_rows + g * a.v_dim, a.v_dim);
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
// is read from memory once and then from cache by the other groups.
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
      groups[g - 1](a, h0, tb, rows, mx + h0, sum + h0, acc + h0 * a.v_dim);
    }
  }
}

// a.out [H, dv] from the per-segment states at `base` (each per_segment = H * (dv + 2) floats:
// max [H], sum [H], unnormalised acc [H, dv]), merged in segment order.
void MergeSegments(const AttentionArgs& a, const float* base, int64_t segments,
                   int64_t per_segment) {
  const int64_t h = a.num_heads, dv = a.v_dim;
  for (int64_t i = 0; i < h; ++i) {
    float global_max = -INFINITY;
    for (int64_t s = 0; s < segments; ++s)
      global_max = std::max(global_max, base[s * per_segment + i]);
    float* out = a.out + i * dv;
    std::fill(out, out + dv, 0.0f);
    float total = 0.0f;
    for (int64_t s = 0; s < segments; ++s) {
      const float* seg = base + s * per_segment;
      const float f = ExpScalar(seg[i] - global_max);
      total += f * seg[h + i];
      const __m256 fv = _mm256_set1_ps(f);
      const float* acc = seg + 2 * h + i * dv;
      for (int64_t c = 0; c < dv; c += 8) {
        const int64_t count = std::min<int64_t>(8, dv - c);
        StorePart(out + c, count,
                  _mm256_fmadd_ps(fv, LoadPart(acc + c, count), LoadPart(out + c, count)));
      }
    }
    DivideRow(out, dv, SinkDenominator(a.sinks, i, global_max, total));
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
// Flash-attention style, per head and per tile of kQueryTile queries, as the AVX-512 kernel:
// the keys are packed once per call, transposed into blocks of kKeyBlock positions
// ([head][block][position / 16][qk_dim][16]), and the values per head ([head][position][v_dim]),
// so the scores of 6 queries x 16 positions are a register tile of 12 accumulators fed by one
// broadcast per query and 2 loads per qk column, the loads one sequential stream. (A head's key
// block, 48 KiB at qk 192, streams from L2: with 2 queries x 32 positions per tile, columns 256
// bytes apart, the loads' latency and the L2 bandwidth bounded the kernel, at 0.6x this speed.)
// Per query: each score is one f32 chain over the qk columns in order, times the scale; the
// blocks (of key indices from 0) in order from the one holding its start, each with an online
// softmax; p.v summed over the block's positions in order, vectorized over v columns. Positions
// before a query's start or at or past its length are masked out of its max, sum and p.v (not
// added as zeros), so a query's result depends only on its own query, start, length and rows:
// never on the other queries of its tile or call, nor on the thread.
constexpr int64_t kKeyBlock = 64;   // positions per block
static_assert(kQueriesBlockPositions % kKeyBlock == 0);
constexpr int64_t kQueryTile = 64;  // queries per task (they share each block from L1/L2)
constexpr int kQs = 6;              // queries per score / softmax / p.v register tile
constexpr int64_t kScoreCols = 16;  // positions per score register tile (2 ymm)

// kt [key_heads][blocks][kKeyBlock / 16][qk][16] (zero past the last position) from the key
// rows, and vt [value_heads][positions][v_dim] from the value rows.
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
          float* at = dst + r / kScoreCols * dq * kScoreCols + r % kScoreCols;  // column c: + 16 c
          if (dtype == DType::kBF16) {
            const uint16_t* key = static_cast<const uint16_t*>(a.keys[t0 + r]) + k0;
            for (int64_t c = 0; c < dq; ++c) at[c * kScoreCols] = BF16ToF32(key[c]);
          } else if (dtype == DType::kF8E4M3) {
            for (int64_t c = 0; c < dq; ++c)
              at[c * kScoreCols] = RowValue(a.rows, a.keys[t0 + r], k0 + c);
          } else {
            StridedKeyF32(qa, t0 + r, head, at, kScoreCols);
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

// s[q][p0 .. p0 + 16) = scale * q_q . key(t0 + r) for the QS queries, from the packed block.
template <int QS>
void BlockScores(const float* const* q, int64_t dq, const float* block, int64_t p0, float scale,
                 float (*s)[kKeyBlock]) {
  __m256 acc[QS][2];
  for (int i = 0; i < QS; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const float* keys = block + p0 * dq;  // [qk][16]
  for (int64_t c = 0; c < dq; ++c) {
    const __m256 k0 = _mm256_loadu_ps(keys + c * kScoreCols);
    const __m256 k1 = _mm256_loadu_ps(keys + c * kScoreCols + 8);
    for (int i = 0; i < QS; ++i) {
      const __m256 qb = _mm256_broadcast_ss(&q[i][c]);
      acc[i][0] = _mm256_fmadd_ps(qb, k0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(qb, k1, acc[i][1]);
    }
  }
  const __m256 sc = _mm256_set1_ps(scale);
  for (int i = 0; i < QS; ++i) {
    for (int v = 0; v < 2; ++v) _mm256_store_ps(&s[i][p0 + 8 * v], _mm256_mul_ps(acc[i][v], sc));
  }
}

// o[q][c0 .. c0 + 8C) += sum over first[q] <= r < rows[q] of p[q][r] * value(t0 + r)[c0 ..], in
// order of r; the last chunk `last` (<= 8) columns wide.
template <int QS, int C>
void BlockValues(const float* vt, int64_t dv, int64_t t0, int64_t rows_max, const int64_t* first,
                 const int64_t* rows, float (*p)[kKeyBlock], float* const* o, int64_t c0,
                 int64_t last) {
  __m256 acc[QS][C];
  for (int i = 0; i < QS; ++i)
    for (int cc = 0; cc < C; ++cc)
      acc[i][cc] = LoadPart(o[i] + c0 + 8 * cc, cc == C - 1 ? last : 8);
  for (int64_t r = 0; r < rows_max; ++r) {
    const float* v = vt + (t0 + r) * dv + c0;
    __m256 vv[C];
    for (int cc = 0; cc < C; ++cc)
      vv[cc] = cc == C - 1 && last < 8 ? LoadPart(v + 8 * cc, last) : _mm256_loadu_ps(v + 8 * cc);
    for (int i = 0; i < QS; ++i) {
      if (r < first[i] || r >= rows[i]) continue;  // masked out: this query's sum is left as is
      const __m256 pb = _mm256_broadcast_ss(&p[i][r]);
      for (int cc = 0; cc < C; ++cc) acc[i][cc] = _mm256_fmadd_ps(pb, vv[cc], acc[i][cc]);
    }
  }
  for (int i = 0; i < QS; ++i)
    for (int cc = 0; cc < C; ++cc)
      StorePart(o[i] + c0 + 8 * cc, cc == C - 1 ? last : 8, acc[i][cc]);
}

template <int QS>
void BlockValuesAll(const float* vt, int64_t dv, int64_t t0, int64_t rows_max,
                    const int64_t* first, const int64_t* rows, float (*p)[kKeyBlock],
                    float* const* o) {
  const int64_t full = dv / 8, rest = dv - full * 8;
  int64_t c = 0;
  for (; c + 2 <= full; c += 2)
    BlockValues<QS, 2>(vt, dv, t0, rows_max, first, rows, p, o, c * 8, 8);
  for (; c < full; ++c) BlockValues<QS, 1>(vt, dv, t0, rows_max, first, rows, p, o, c * 8, 8);
  if (rest != 0) BlockValues<QS, 1>(vt, dv, t0, rows_max, first, rows, p, o, full * 8, rest);
}

// One tile of QS queries (pointers q[i], lengths len[i], starts start[i] or none, state
// mx/sum/o) over block b.
template <int QS>
void QueryTileBlock(const AttentionArgs& a, const float* vt, const float* block, int64_t b,
                    const float* const* q, const int64_t* len, const int64_t* start, float* mx,
                    float* sum, float* const* o) {
  const int64_t t0 = b * kKeyBlock;
  alignas(32) float s[QS][kKeyBlock];
  int64_t first[QS], rows[QS];  // each query's positions [first, rows) of the block
  const int64_t rows_max = QueryBlockSpans(QS, len, start, t0, kKeyBlock, first, rows);
  for (int64_t p0 = 0; p0 < rows_max; p0 += kScoreCols) {
    BlockScores<QS>(q, a.qk_dim, block, p0, a.scale, s);
  }
  for (int i = 0; i < QS; ++i) {
    if (rows[i] <= first[i]) continue;
    SoftmaxStep(s[i], rows[i], &mx[i], &sum[i], o[i], a.v_dim, first[i]);
  }
  BlockValuesAll<QS>(vt, a.v_dim, t0, rows_max, first, rows, s, o);
}

using QueryTileBlockFn = void (*)(const AttentionArgs&, const float*, const float*, int64_t,
                                  const float* const*, const int64_t*, const int64_t*, float*,
                                  float*, float* const*);
constexpr QueryTileBlockFn kQueryTileBlocks[kQs] = {QueryTileBlock<1>, QueryTileBlock<2>,
                                                    QueryTileBlock<3>, QueryTileBlock<4>,
                                                    QueryTileBlock<5>, QueryTileBlock<6>};

// Head `head`, queries [i0, i1) (at most kQueryTile). kt, vt: as Pack wrote them.
void HeadQueries(const QueriesAttentionArgs& qa, const float* kt, const float* vt,
                 int64_t positions, int64_t head, int64_t i0, int64_t i1) {
  const AttentionArgs& a = qa.shared;
  const int64_t h = a.num_heads, dq = a.qk_dim, dv = a.v_dim;
  const int64_t blocks = (positions + kKeyBlock - 1) / kKeyBlock;
  const int64_t key_head = a.key_head_stride == 0 ? 0 : head;
  const float* vhead = vt + (a.value_head_stride == 0 ? 0 : head) * positions * dv;
  thread_local std::vector<float> acc_rows;  // [kQueryTile, dv]
  if (static_cast<int64_t>(acc_rows.size()) < kQueryTile * dv) acc_rows.resize(kQueryTile * dv);
  float mx[kQueryTile], sum[kQueryTile];
  const float* q[kQueryTile];
  float* o[kQueryTile];
  int64_t longest = 0;
  for (int64_t i = i0; i < i1; ++i) {
    mx[i - i0] = -INFINITY;
    sum[i - i0] = 0.0f;
    q[i - i0] = qa.q + (i * h + head) * dq;
    o[i - i0] = acc_rows.data() + (i - i0) * dv;
    std::fill(o[i - i0], o[i - i0] + dv, 0.0f);
    longest = std::max(longest, qa.lengths[i]);
  }
  for (int64_t b = FirstAttendedBlock(qa, i0, i1, kKeyBlock); b * kKeyBlock < longest; ++b) {
    const float* block = kt + (key_head * blocks + b) * dq * kKeyBlock;
    for (int64_t j = 0; j < i1 - i0; j += kQs) {
      const int qs = static_cast<int>(std::min<int64_t>(kQs, i1 - i0 - j));
      kQueryTileBlocks[qs - 1](a, vhead, block, b, q + j, qa.lengths + i0 + j,
                               qa.starts == nullptr ? nullptr : qa.starts + i0 + j, mx + j,
                               sum + j, o + j);
    }
  }
  for (int64_t i = i0; i < i1; ++i) {
    float* out = qa.out + (i * h + head) * dv;
    if (qa.lengths[i] <= QueryStart(qa, i)) {  // attends nothing
      std::fill(out, out + dv, 0.0f);
      continue;
    }
    std::copy(o[i - i0], o[i - i0] + dv, out);
    DivideRow(out, dv, SinkDenominator(a.sinks, head, mx[i - i0], sum[i - i0]));
  }
}

void AttentionQueries(const QueriesAttentionArgs& qa) {
  LATENT_CHECK(SharedKeysTaken(qa));
  const AttentionArgs& a = qa.shared;
  int64_t positions = 0;
  for (int64_t i = 0; i < qa.num_queries; ++i) positions = std::max(positions, qa.lengths[i]);
  const int64_t blocks = (positions + kKeyBlock - 1) / kKeyBlock;
  const int64_t key_heads = a.key_head_stride == 0 ? 1 : a.num_heads;
  const int64_t value_heads = a.value_head_stride == 0 ? 1 : a.num_heads;
  // [key_heads, blocks, kKeyBlock / 16, qk, 16], then [value_heads, positions, v_dim].
  thread_local std::vector<float> packed;
  const int64_t key_floats = key_heads * blocks * a.qk_dim * kKeyBlock;
  const int64_t floats = key_floats + value_heads * positions * a.v_dim;
  if (static_cast<int64_t>(packed.size()) < floats) packed.resize(floats);
  const float* kt = packed.data();
  const float* vt = packed.data() + key_floats;
  if (positions > 0)
    Pack(qa, positions, key_heads, value_heads, packed.data(), packed.data() + key_floats);
  const int64_t tiles = (qa.num_queries + kQueryTile - 1) / kQueryTile;
  // Tasks (head, tile of queries), later tiles first: they attend more positions, and the pool
  // hands tasks out dynamically.
  threads::ParallelFor(a.num_heads * tiles, 1, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t tile = tiles - 1 - j / a.num_heads, head = j % a.num_heads;
      HeadQueries(qa, kt, vt, positions, head, tile * kQueryTile,
                  std::min(qa.num_queries, (tile + 1) * kQueryTile));
    }
  });
}

}  // namespace

void FillAttentionKernel(KernelTable& t) {
  t.attention = Attention;
  t.attention_queries = AttentionQueries;
}

}  // namespace latent::kernels::avx2
LATENT_AVX2_END
