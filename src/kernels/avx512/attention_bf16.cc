// One query token's attention (kernels/attention.h) on vdpbf16ps, under
// AttentionArgs::bf16_products, over bf16 rows with one shared key/value head: MLA's absorbed
// decode (and DSA's over its selected rows). The query and, per block, the probabilities are
// rounded to bf16; the rows are read in place as they are stored; every sum is f32. This is how
// FlashMLA runs bf16 models; the f32 kernel (attention_avx512.cc) widens each row element to f32
// for one FMA per product, this one takes two products per instruction and widens nothing.
//
// The structure is the f32 kernel's: segments of positions whose size depends on L only, run in
// parallel and merged in segment order (attention_common.h); in each, blocks of 64 rows with an
// online softmax (avx512_common.h) per head; heads 8 at a time against each row. q.k: register
// tiles of 8 heads x 3 rows over 32 dims per product, reduced by the f32 kernel's lane tree.
// p.v: row pairs (v_i[c], v_i+1[c]) interleaved into one register, 8 heads x 48 columns. Each
// head's sums run in one fixed order, so a token's result depends on its query and rows only.
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/bf16_target.h"
#include "kernels/kernel_table.h"
#include "threads/thread_pool.h"

LATENT_AVX512_BF16_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/attention_common.h"

namespace latent::kernels::avx512 {
namespace {

constexpr int64_t kBf16AttnBlock = 64;  // rows per online-softmax step (kSoftmaxBlock)
constexpr int kBf16AttnGroup = 8;       // heads processed together
static_assert(kBf16AttnBlock == kSoftmaxBlock);

// The first `count` (<= 32) lanes of 32 bf16 elements.
inline __mmask32 Bf16Mask(int64_t count) {
  return count >= 32 ? ~__mmask32{0} : (__mmask32{1} << count) - 1;
}

// R shared rows against the G (<= 8) heads of a group: p[g][i + r] = scale * q_g . key_r, over
// qb [G heads][dp] (the group's query in bf16, zero past qk_dim).
template <int G, int R>
void ScoreRowsBf16(const AttentionArgs& a, const uint16_t* qb, int64_t dp, int64_t tb, int64_t i,
                   float (*p)[kBf16AttnBlock]) {
  const int64_t d = a.qk_dim;
  const uint16_t* key[R];
  for (int r = 0; r < R; ++r) key[r] = static_cast<const uint16_t*>(a.keys[tb + i + r]);
  __m512 acc[R][8];
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < 8; ++g) acc[r][g] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < d; c += 32) {
    const __mmask32 m = Bf16Mask(d - c);
    __m512i kv[R];
    for (int r = 0; r < R; ++r) kv[r] = _mm512_maskz_loadu_epi16(m, key[r] + c);
    for (int g = 0; g < G; ++g) {
      const __m512bh qv = (__m512bh)_mm512_loadu_si512(qb + g * dp + c);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], qv, (__m512bh)kv[r]);
    }
  }
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (int r = 0; r < R; ++r) {
    alignas(32) float sums[8];
    _mm256_store_ps(sums, _mm256_mul_ps(Reduce8(acc[r]), scale));
    for (int g = 0; g < G; ++g) p[g][i + r] = sums[g];
  }
}

// acc_rows[g][c0 + 16 cc ...] += sum over row pairs (i, i + 1) of (p_g,i, p_g,i+1) .
// (v_i[c], v_i+1[c]) for C chunks of 16 columns from c0 (the last masked by `last`); pp [G][32]
// holds each head's probabilities as bf16 pairs (0 past the block's rows).
template <int G, int C>
void ValueChunksBf16(const AttentionArgs& a, int64_t tb, int64_t rows, const uint32_t (*pp)[32],
                     float* acc_rows, int64_t c0, __mmask16 last) {
  const int64_t d = a.v_dim;
  __mmask16 mask[C];
  for (int cc = 0; cc < C; ++cc) mask[cc] = cc == C - 1 ? last : static_cast<__mmask16>(0xffff);
  __m512 acc[G][C];
  for (int g = 0; g < G; ++g) {
    for (int cc = 0; cc < C; ++cc) {
      acc[g][cc] = _mm512_maskz_loadu_ps(mask[cc], acc_rows + g * d + c0 + cc * 16);
    }
  }
  for (int64_t i = 0; i < rows; i += 2) {
    const uint16_t* v0 = static_cast<const uint16_t*>(a.values[tb + i]);
    const uint16_t* v1 =
        i + 1 < rows ? static_cast<const uint16_t*>(a.values[tb + i + 1]) : nullptr;
    __m512i vv[C];  // 16 columns of the two rows as bf16 pairs (row i low, row i + 1 high)
    for (int cc = 0; cc < C; ++cc) {
      const int64_t at = c0 + cc * 16;
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask[cc], v0 + at));
      const __m512i hi = v1 != nullptr
                             ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask[cc], v1 + at))
                             : _mm512_setzero_si512();
      vv[cc] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
    }
    for (int g = 0; g < G; ++g) {
      const __m512bh pb = (__m512bh)_mm512_set1_epi32(static_cast<int32_t>(pp[g][i / 2]));
      for (int cc = 0; cc < C; ++cc) {
        acc[g][cc] = _mm512_dpbf16_ps(acc[g][cc], pb, (__m512bh)vv[cc]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int cc = 0; cc < C; ++cc) {
      _mm512_mask_storeu_ps(acc_rows + g * d + c0 + cc * 16, mask[cc], acc[g][cc]);
    }
  }
}

// One block of rows [tb, tb + rows) for the G heads whose query is qb: the online-softmax step
// per head, then the probabilities in bf16 against the value rows.
template <int G>
void BlockGroupBf16(const AttentionArgs& a, const uint16_t* qb, int64_t dp, int64_t tb,
                    int64_t rows, float* mx, float* sum, float* acc_rows) {
  alignas(64) float p[kBf16AttnGroup][kBf16AttnBlock];
  int64_t i = 0;
  for (; i + 3 <= rows; i += 3) ScoreRowsBf16<G, 3>(a, qb, dp, tb, i, p);
  for (; i < rows; ++i) ScoreRowsBf16<G, 1>(a, qb, dp, tb, i, p);
  alignas(64) uint32_t pp[kBf16AttnGroup][32];  // [G][32 pairs]
  for (int g = 0; g < G; ++g) {
    OnlineSoftmaxBlock(p[g], rows, &mx[g], &sum[g], acc_rows + g * a.v_dim, a.v_dim);
    for (int h = 0; h < 2; ++h) {
      const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_load_ps(&p[g][32 * h + 16]),
                                             _mm512_load_ps(&p[g][32 * h]));
      _mm512_store_si512(&pp[g][16 * h], (__m512i)b);
    }
  }
  const int64_t full = a.v_dim / 16;
  const __mmask16 tail = TailMask(a.v_dim - full * 16);
  const __mmask16 all = 0xffff;
  int64_t c = 0;
  for (; c + 3 <= full; c += 3) ValueChunksBf16<G, 3>(a, tb, rows, pp, acc_rows, c * 16, all);
  // The last two whole chunks (512 columns: 10 x 3 + 2) together: one at a time spends a
  // broadcast per product.
  for (; c + 2 <= full; c += 2) ValueChunksBf16<G, 2>(a, tb, rows, pp, acc_rows, c * 16, all);
  for (; c < full; ++c) ValueChunksBf16<G, 1>(a, tb, rows, pp, acc_rows, c * 16, all);
  if (tail != 0) ValueChunksBf16<G, 1>(a, tb, rows, pp, acc_rows, full * 16, tail);
}

using BlockGroupBf16Fn = void (*)(const AttentionArgs&, const uint16_t*, int64_t, int64_t,
                                  int64_t, float*, float*, float*);
constexpr BlockGroupBf16Fn kBlockGroupsBf16[kBf16AttnGroup] = {
    BlockGroupBf16<1>, BlockGroupBf16<2>, BlockGroupBf16<3>, BlockGroupBf16<4>,
    BlockGroupBf16<5>, BlockGroupBf16<6>, BlockGroupBf16<7>, BlockGroupBf16<8>};

// Rows [t0, t1) for all heads (qb [H][dp]): per head the running max, the sum and the
// unnormalised acc (num_heads rows of v_dim floats). Blocks outside, head groups inside.
void SegmentAllHeadsBf16(const AttentionArgs& a, const uint16_t* qb, int64_t dp, int64_t t0,
                         int64_t t1, float* mx, float* sum, float* acc) {
  std::fill(mx, mx + a.num_heads, -INFINITY);
  std::fill(sum, sum + a.num_heads, 0.0f);
  std::fill(acc, acc + a.num_heads * a.v_dim, 0.0f);
  for (int64_t tb = t0; tb < t1; tb += kBf16AttnBlock) {
    const int64_t rows = std::min(kBf16AttnBlock, t1 - tb);
    for (int64_t h0 = 0; h0 < a.num_heads; h0 += kBf16AttnGroup) {
      const int g = static_cast<int>(std::min<int64_t>(kBf16AttnGroup, a.num_heads - h0));
      kBlockGroupsBf16[g - 1](a, qb + h0 * dp, dp, tb, rows, mx + h0, sum + h0,
                              acc + h0 * a.v_dim);
    }
  }
}

// Over bf16 rows with one shared head (the only calls FillBf16Attention sends here).
void AttentionBf16(const AttentionArgs& a) {
  const int64_t h = a.num_heads, dv = a.v_dim;
  if (a.length <= 0) {
    std::fill(a.out, a.out + h * dv, 0.0f);
    return;
  }
  // q [H, qk_dim] -> qb [H, dp] in bf16 (round to nearest even), zero past qk_dim.
  const int64_t dp = (a.qk_dim + 31) / 32 * 32;
  thread_local std::vector<uint16_t> q_buffer;
  std::vector<uint16_t>& qb = q_buffer;
  qb.resize(h * dp);
  for (int64_t i = 0; i < h; ++i) {
    for (int64_t c = 0; c < dp; c += 16) {
      const __mmask16 m = TailMask(std::clamp<int64_t>(a.qk_dim - c, 0, 16));
      const __m512 v = _mm512_maskz_loadu_ps(m, a.q + i * a.qk_dim + c);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&qb[i * dp + c]),
                          (__m256i)_mm512_cvtneps_pbh(v));
    }
  }
  const int64_t seg_rows = SegmentRows(a.length);
  const int64_t segments = (a.length + seg_rows - 1) / seg_rows;
  thread_local std::vector<float> work_buffer;  // per segment: max [h], sum [h], acc [h, dv]
  std::vector<float>& work = work_buffer;
  if (segments == 1) {
    if (static_cast<int64_t>(work.size()) < 2 * h) work.resize(2 * h);
    float* stats = work.data();
    SegmentAllHeadsBf16(a, qb.data(), dp, 0, a.length, stats, stats + h, a.out);
    for (int64_t i = 0; i < h; ++i) {
      DivideRow(a.out + i * dv, dv, SinkDenominator(a.sinks, i, stats[i], stats[h + i]));
    }
    return;
  }
  const int64_t per_segment = h * (dv + 2);
  if (static_cast<int64_t>(work.size()) < segments * per_segment) {
    work.resize(segments * per_segment);
  }
  float* base = work.data();
  const uint16_t* q = qb.data();
  threads::ParallelFor(segments, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      float* seg = base + s * per_segment;
      SegmentAllHeadsBf16(a, q, dp, s * seg_rows, std::min(a.length, (s + 1) * seg_rows), seg,
                          seg + h, seg + 2 * h);
    }
  });
  MergeSegments(a, base, segments, per_segment);
}

}  // namespace

bool Bf16TakesAttention(const AttentionArgs& a) {
  return a.bf16_products && a.rows.dtype == DType::kBF16 && a.key_head_stride == 0 &&
         a.value_head_stride == 0;
}

void FillBf16Attention(KernelTable& t) {
  static void (*other)(const AttentionArgs&) = nullptr;  // the table's kernel before this call
  other = t.attention;
  t.attention = [](const AttentionArgs& a) {
    if (Bf16TakesAttention(a)) {
      AttentionBf16(a);
    } else {
      other(a);
    }
  };
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_BF16_END
