// AVX-512 attention of one query token over L positions (kernels/attention.h).
//
// The positions are cut into segments whose size depends on L only; segments run in parallel,
// each with an online softmax over 64-row blocks (running max, rescaled partial sums), and are
// merged in segment order at the end. With a shared key/value head (absorbed MLA: head stride 0)
// the heads are processed 8 at a time against each row (register tiles of 8 heads x 3 rows for
// q.k and 8 heads x 48 columns for p.v), so a row is read once per 8 heads and not once per head.
// A token's result depends only on its own query and rows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/avx512_kernels.h"
#include "threads/thread_pool.h"

LATENT_AVX512_BEGIN
namespace latent::kernels::avx512 {
namespace {

constexpr int64_t kBlock = 64;  // rows per online-softmax step
constexpr int kGroup = 8;       // heads processed together

// Rows per segment: a function of L only, so the arithmetic never depends on the thread count.
int64_t SegmentRows(int64_t length) {
  if (length <= 512) return std::max<int64_t>(length, 1);
  return std::max<int64_t>(512, ((length + 7) / 8 + 63) / 64 * 64);
}

// The 8 lane sums of a[0..7] as lanes 0..7, in one fixed tree (pairs of lanes, then 128-bit
// blocks); head g's sum never depends on the other vectors.
inline __m256 Reduce8(const __m512* a) {
  const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
  const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
  const __m512 t2 = _mm512_add_ps(_mm512_unpacklo_ps(a[4], a[5]), _mm512_unpackhi_ps(a[4], a[5]));
  const __m512 t3 = _mm512_add_ps(_mm512_unpacklo_ps(a[6], a[7]), _mm512_unpackhi_ps(a[6], a[7]));
  // Per 128-bit block: [a0, a1, a2, a3] and [a4, a5, a6, a7] (partial sums of that block).
  const __m512 u0 = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 u1 = _mm512_add_ps(_mm512_shuffle_ps(t2, t3, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(t2, t3, _MM_SHUFFLE(3, 2, 3, 2)));
  // Blocks: [u0 b0+b2, u0 b1+b3, u1 b0+b2, u1 b1+b3], then adjacent blocks added.
  const __m512 v = _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 w = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps256(_mm512_shuffle_f32x4(w, w, _MM_SHUFFLE(2, 0, 2, 0)));
}

// R shared key rows against the G (<= 8) heads of a group: p[g][i + r] = scale * q_g . key_r.
template <int G, int R>
void ScoreRows(const AttentionArgs& a, const float* q, int64_t tb, int64_t i, float (*p)[kBlock],
               const float* const* next) {
  const int64_t d = a.qk_dim;
  const float* key[R];
  for (int r = 0; r < R; ++r) key[r] = a.keys[tb + i + r];
  __m512 acc[R][8];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < 8; ++g) acc[r][g] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= d; c += 16) {
    __m512 kv[R];
    for (int r = 0; r < R; ++r) kv[r] = _mm512_loadu_ps(key[r] + c);
    if (next != nullptr) {  // the rows after these, one cache line each step
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(next[r] + c), _MM_HINT_T0);
    }
    for (int g = 0; g < G; ++g) {
      const __m512 qv = _mm512_loadu_ps(q + g * d + c);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_fmadd_ps(qv, kv[r], acc[r][g]);
    }
  }
  if (c < d) {
    const __mmask16 m = TailMask(d - c);
    __m512 kv[R];
    for (int r = 0; r < R; ++r) kv[r] = _mm512_maskz_loadu_ps(m, key[r] + c);
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
template <int G>
void Scores(const AttentionArgs& a, int64_t h0, int64_t tb, int64_t rows, float (*p)[kBlock]) {
  const int64_t d = a.qk_dim;
  const float* q = a.q + h0 * d;
  if (a.key_head_stride == 0) {  // one shared key row for every head
    int64_t i = 0;
    for (; i + 3 <= rows; i += 3) {
      ScoreRows<G, 3>(a, q, tb, i, p, tb + i + 6 <= a.length ? a.keys + tb + i + 3 : nullptr);
    }
    for (; i < rows; ++i) ScoreRows<G, 1>(a, q, tb, i, p, nullptr);
    return;
  }
  for (int64_t i = 0; i < rows; ++i) {
    const float* key0 = a.keys[tb + i] + h0 * a.key_head_stride;
    __m512 acc[8];
    for (int g = 0; g < 8; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += 16) {
      const __mmask16 m = TailMask(std::min<int64_t>(16, d - c));
      for (int g = 0; g < G; ++g) {
        acc[g] =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + g * d + c),
                            _mm512_maskz_loadu_ps(m, key0 + g * a.key_head_stride + c), acc[g]);
      }
    }
    alignas(32) float sums[8];
    _mm256_store_ps(sums, _mm256_mul_ps(Reduce8(acc), _mm256_set1_ps(a.scale)));
    for (int g = 0; g < G; ++g) p[g][i] = sums[g];
  }
}

// acc[g][c0 + 16 cc ...] += sum over i of p[g][i] * value(tb + i) for C chunks from column c0
// (the last one masked by `last`), shared value rows.
template <int G, int C>
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
    const float* v = a.values[tb + i] + c0;
    __m512 vv[C];
    for (int cc = 0; cc < C; ++cc) vv[cc] = _mm512_maskz_loadu_ps(mask[cc], v + cc * 16);
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
template <int C>
void HeadValueChunks(const AttentionArgs& a, int64_t head, int64_t tb, int64_t rows, const float* p,
                     float* acc_row, int64_t c0, __mmask16 last) {
  __mmask16 mask[C];
  for (int cc = 0; cc < C; ++cc) mask[cc] = cc == C - 1 ? last : static_cast<__mmask16>(0xffff);
  __m512 acc[C];
  for (int cc = 0; cc < C; ++cc) acc[cc] = _mm512_maskz_loadu_ps(mask[cc], acc_row + c0 + cc * 16);
  const int64_t offset = head * a.value_head_stride + c0;
  for (int64_t i = 0; i < rows; ++i) {
    const float* v = a.values[tb + i] + offset;
    const __m512 pb = _mm512_set1_ps(p[i]);
    for (int cc = 0; cc < C; ++cc) {
      acc[cc] = _mm512_fmadd_ps(pb, _mm512_maskz_loadu_ps(mask[cc], v + cc * 16), acc[cc]);
    }
  }
  for (int cc = 0; cc < C; ++cc) _mm512_mask_storeu_ps(acc_row + c0 + cc * 16, mask[cc], acc[cc]);
}

// acc[g] += sum over i of p[g][i] * value(tb + i, h0 + g); acc rows are v_dim floats apart.
template <int G>
void Values(const AttentionArgs& a, int64_t h0, int64_t tb, int64_t rows, float (*p)[kBlock],
            float* acc_rows) {
  const int64_t d = a.v_dim;
  const int64_t full = d / 16;
  const __mmask16 tail = TailMask(d - full * 16);
  const __mmask16 all = 0xffff;
  if (a.value_head_stride == 0) {
    int64_t c = 0;
    for (; c + 3 <= full; c += 3) ValueChunks<G, 3>(a, tb, rows, p, acc_rows, c * 16, all);
    for (; c < full; ++c) ValueChunks<G, 1>(a, tb, rows, p, acc_rows, c * 16, all);
    if (tail != 0) ValueChunks<G, 1>(a, tb, rows, p, acc_rows, full * 16, tail);
    return;
  }
  for (int g = 0; g < G; ++g) {
    float* acc = acc_rows + g * d;
    int64_t c = 0;
    for (; c + 8 <= full; c += 8) HeadValueChunks<8>(a, h0 + g, tb, rows, p[g], acc, c * 16, all);
    for (; c + 4 <= full; c += 4) HeadValueChunks<4>(a, h0 + g, tb, rows, p[g], acc, c * 16, all);
    for (; c < full; ++c) HeadValueChunks<1>(a, h0 + g, tb, rows, p[g], acc, c * 16, all);
    if (tail != 0) HeadValueChunks<1>(a, h0 + g, tb, rows, p[g], acc, full * 16, tail);
  }
}

void ScaleRow(float* row, int64_t d, float factor) {
  const __m512 f = _mm512_set1_ps(factor);
  for (int64_t c = 0; c < d; c += 16) {
    const __mmask16 m = TailMask(std::min<int64_t>(16, d - c));
    _mm512_mask_storeu_ps(row + c, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + c), f));
  }
}

void DivideRow(float* row, int64_t d, float divisor) {
  const __m512 f = _mm512_set1_ps(divisor);
  for (int64_t c = 0; c < d; c += 16) {
    const __mmask16 m = TailMask(std::min<int64_t>(16, d - c));
    _mm512_mask_storeu_ps(row + c, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, row + c), f));
  }
}

// One block of rows [tb, tb + rows) for heads [h0, h0 + G): updates the running max `mx`, sum
// `sum` and unnormalised acc[g] = sum of exp(s - mx) * v (acc_rows: G rows of v_dim floats).
template <int G>
void BlockGroup(const AttentionArgs& a, int64_t h0, int64_t tb, int64_t rows, float* mx, float* sum,
                float* acc_rows) {
  alignas(64) float p[kGroup][kBlock];
  Scores<G>(a, h0, tb, rows, p);
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
    const __m512 mv = _mm512_set1_ps(mx[g]);
    __m512 s = _mm512_setzero_ps();
    for (int64_t i = 0; i < rows; i += 16) {
      const __mmask16 m = TailMask(std::min<int64_t>(16, rows - i));
      const __m512 e = _mm512_maskz_mov_ps(m, Exp(_mm512_sub_ps(_mm512_loadu_ps(&p[g][i]), mv)));
      _mm512_store_ps(&p[g][i], e);
      s = _mm512_add_ps(s, e);
    }
    sum[g] += ReduceAdd(s);
  }
  Values<G>(a, h0, tb, rows, p, acc_rows);
}

using BlockGroupFn = void (*)(const AttentionArgs&, int64_t, int64_t, int64_t, float*, float*,
                              float*);
constexpr BlockGroupFn kBlockGroups[kGroup] = {BlockGroup<1>, BlockGroup<2>, BlockGroup<3>,
                                               BlockGroup<4>, BlockGroup<5>, BlockGroup<6>,
                                               BlockGroup<7>, BlockGroup<8>};

// Rows [t0, t1) for all heads: per head the running max, the sum and the unnormalised acc
// (acc: num_heads rows of v_dim floats). Blocks of rows outside, head groups inside, so a block
// is read from memory once and then from L1/L2 by the other groups.
void SegmentAllHeads(const AttentionArgs& a, int64_t t0, int64_t t1, float* mx, float* sum,
                     float* acc) {
  std::fill(mx, mx + a.num_heads, -INFINITY);
  std::fill(sum, sum + a.num_heads, 0.0f);
  std::fill(acc, acc + a.num_heads * a.v_dim, 0.0f);
  for (int64_t tb = t0; tb < t1; tb += kBlock) {
    const int64_t rows = std::min(kBlock, t1 - tb);
    for (int64_t h0 = 0; h0 < a.num_heads; h0 += kGroup) {
      const int g = static_cast<int>(std::min<int64_t>(kGroup, a.num_heads - h0));
      float* m = mx + h0;
      float* s = sum + h0;
      float* acc_rows = acc + h0 * a.v_dim;
      kBlockGroups[g - 1](a, h0, tb, rows, m, s, acc_rows);
    }
  }
}

void Attention(const AttentionArgs& a) {
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
    for (int64_t i = 0; i < h; ++i) DivideRow(a.out + i * dv, dv, stats[h + i]);
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
      const __m512 fv = _mm512_set1_ps(f);
      const float* acc = seg + 2 * h + i * dv;
      for (int64_t c = 0; c < dv; c += 16) {
        const __mmask16 m = TailMask(std::min<int64_t>(16, dv - c));
        const __m512 v = _mm512_fmadd_ps(fv, _mm512_maskz_loadu_ps(m, acc + c),
                                         _mm512_maskz_loadu_ps(m, out + c));
        _mm512_mask_storeu_ps(out + c, m, v);
      }
    }
    DivideRow(out, dv, total);
  }
}

}  // namespace

void FillAttentionKernel(KernelTable& t) { t.attention = Attention; }

}  // namespace latent::kernels::avx512
LATENT_AVX512_END
