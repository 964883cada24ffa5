// The keys and values of an attention_queries call under bf16 compute, packed as bf16 pairs in
// the layouts the vdpbf16ps kernel (attention_queries_bf16.cc) and the AMX one
// (amx/attention_queries_amx.cc) read: per block of kSoftmaxBlock positions, the keys
// transposed into lines of one k-pair for every position of the block; the values in rows of
// one position pair. And the value product on vdpbf16ps over them, which masks each query's
// positions (BlockValues): the vdpbf16ps kernel's, and the AMX kernel's for a block a query
// attends in part. Include it inside a target region with AVX512-BF16, after avx512_common.h.
#pragma once

#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "kernels/attention.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

namespace latent::kernels::avx512 {
// Internal linkage: each includer's target region compiles its own copy.
namespace {

// Elements c0 .. c0 + 31 of the row at `row` (f32 or bf16, the formats attention_queries takes)
// as 16 bf16 pairs (element c0 + 2 j in the low half of pair j), zero from element `end` on. f32
// rounds to nearest even (vcvtne2ps2bf16).
inline __m512i RowPairs16(DType dtype, const void* row, int64_t c0, int64_t end) {
  const int64_t count = std::clamp<int64_t>(end - c0, 0, 32);
  if (dtype == DType::kBF16) {
    const __mmask32 m = count >= 32 ? ~__mmask32{0} : (__mmask32{1} << count) - 1;
    return _mm512_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + c0);
  }
  const float* f = static_cast<const float*>(row) + c0;
  const __m512 lo = _mm512_maskz_loadu_ps(TailMask(std::min<int64_t>(count, 16)), f);
  const __m512 hi = _mm512_maskz_loadu_ps(TailMask(std::max<int64_t>(count - 16, 0)), f + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// Elements c .. c + 15 (the first `count` <= 16 of them, zero past) of the row at `row` as bf16,
// widened to the low half of 16 32-bit lanes.
inline __m512i RowBf16x16(DType dtype, const void* row, int64_t c, int64_t count) {
  const __mmask16 m = TailMask(count);
  if (dtype == DType::kBF16) {
    return _mm512_cvtepu16_epi32(
        _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + c));
  }
  const float* f = static_cast<const float*>(row) + c;
  return _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, f)));
}

// Elements c0 .. c0 + 31 of head `head`'s key at position t as 16 bf16 pairs (RowPairs16), zero
// past qk_dim: from its row, or with QueriesAttentionArgs::shared_keys from its own values below
// qk_dim - shared_key_dims and the shared rotary key's from there on.
inline __m512i KeyPairs16(const QueriesAttentionArgs& qa, int64_t t, int64_t head, int64_t c0) {
  const AttentionArgs& a = qa.shared;
  const int64_t dq = a.qk_dim, k0 = head * a.key_head_stride, own = dq - qa.shared_key_dims;
  if (own == dq) return RowPairs16(a.rows.dtype, a.keys[t], k0 + c0, k0 + dq);
  const float* key = static_cast<const float*>(a.keys[t]) + k0;
  if (c0 + 32 <= own) return RowPairs16(DType::kF32, key, c0, own);
  if (c0 >= own) return RowPairs16(DType::kF32, qa.shared_keys[t], c0 - own, dq - own);
  alignas(64) float joined[32];  // the 32 values across the two parts
  for (int64_t j = 0; j < 32; ++j) {
    const int64_t c = c0 + j;
    joined[j] = c < own ? key[c] : c < dq ? qa.shared_keys[t][c - own] : 0.0f;
  }
  return RowPairs16(DType::kF32, joined, 0, 32);
}

// The packed layout of a call's `positions` (its longest length): kt [key_heads][blocks]
// [key_lines][kSoftmaxBlock] and vt [value_heads][value_pairs][v_dim], each element a bf16 pair,
// zero past the last position and past qk_dim. key_lines >= (qk_dim + 1) / 2 and value_pairs >=
// (positions + 1) / 2: the AMX kernel pads them to whole tiles.
struct PackedQueriesLayout {
  int64_t positions = 0, blocks = 0, key_heads = 0, value_heads = 0;
  int64_t key_lines = 0, value_pairs = 0, v_dim = 0;

  PackedQueriesLayout(const QueriesAttentionArgs& qa, int64_t key_line_multiple,
                      int64_t value_pair_multiple) {
    const AttentionArgs& a = qa.shared;
    for (int64_t i = 0; i < qa.num_queries; ++i) positions = std::max(positions, qa.lengths[i]);
    blocks = (positions + kSoftmaxBlock - 1) / kSoftmaxBlock;
    key_heads = a.key_head_stride == 0 ? 1 : a.num_heads;
    value_heads = a.value_head_stride == 0 ? 1 : a.num_heads;
    v_dim = a.v_dim;
    const int64_t pairs = (a.qk_dim + 1) / 2, rows2 = (positions + 1) / 2;
    key_lines = (pairs + key_line_multiple - 1) / key_line_multiple * key_line_multiple;
    value_pairs = (rows2 + value_pair_multiple - 1) / value_pair_multiple * value_pair_multiple;
  }
  int64_t key_words() const { return key_heads * blocks * key_lines * kSoftmaxBlock; }
  int64_t value_words() const { return value_heads * value_pairs * v_dim; }
};

// Writes kt and vt of `l` (PackedQueriesLayout) from qa's rows on the thread pool. Keys 16
// positions x 16 pairs at a time, one transpose each; values 16 columns of a position pair at a
// time.
inline void PackQueriesBf16(const QueriesAttentionArgs& qa, const PackedQueriesLayout& l,
                            uint32_t* kt, uint32_t* vt) {
  LATENT_CHECK(SharedKeysTaken(qa));
  const AttentionArgs& a = qa.shared;
  constexpr int64_t kKeys = kSoftmaxBlock;
  const int64_t dv = a.v_dim, positions = l.positions;
  const int64_t rows2 = (positions + 1) / 2;
  const int64_t heads = std::max(l.key_heads, l.value_heads);
  const DType dtype = a.rows.dtype;
  threads::ParallelFor(heads * l.blocks, 4, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t head = j / l.blocks, block = j % l.blocks;
      const int64_t t0 = block * kKeys, rows = std::min(kKeys, positions - t0);
      if (head < l.key_heads) {
        uint32_t* dst = kt + (head * l.blocks + block) * l.key_lines * kKeys;
        for (int64_t r0 = 0; r0 < kKeys; r0 += 16) {
          for (int64_t cp0 = 0; cp0 < l.key_lines; cp0 += 16) {
            __m512i r[16], line[16];
            for (int64_t i = 0; i < 16; ++i) {
              r[i] = r0 + i < rows ? KeyPairs16(qa, t0 + r0 + i, head, 2 * cp0)
                                   : _mm512_setzero_si512();
            }
            Transpose16x16(r, line);
            for (int64_t p = 0; p < std::min<int64_t>(16, l.key_lines - cp0); ++p) {
              _mm512_storeu_si512(dst + (cp0 + p) * kKeys + r0, line[p]);
            }
          }
        }
      }
      if (head < l.value_heads) {
        const int64_t v0 = head * a.value_head_stride;
        const int64_t last = block + 1 == l.blocks ? l.value_pairs : (t0 + kKeys) / 2;
        for (int64_t rp = t0 / 2; rp < std::min(l.value_pairs, last); ++rp) {
          uint32_t* dst = vt + (head * l.value_pairs + rp) * dv;
          if (rp >= rows2) {  // padding past the last position
            std::fill(dst, dst + dv, 0u);
            continue;
          }
          const void* even = a.values[2 * rp];
          const void* odd = 2 * rp + 1 < positions ? a.values[2 * rp + 1] : nullptr;
          for (int64_t c = 0; c < dv; c += 16) {
            const int64_t count = std::min<int64_t>(16, dv - c);
            const __m512i lo = RowBf16x16(dtype, even, v0 + c, count);
            const __m512i hi = odd != nullptr ? RowBf16x16(dtype, odd, v0 + c, count)
                                              : _mm512_setzero_si512();
            _mm512_mask_storeu_epi32(dst + c, TailMask(count),
                                     _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
          }
        }
      }
    }
  });
}

// o[i][c0..c0+16C) += sum over the position pairs rp < pairs_max that query i attends of p pair .
// value pair, in order of rp. Query i attends positions [first[i], rows[i]) of the block. pp[i]:
// its probabilities as bf16 pairs (0 outside its positions); vt: the head's value pairs from the
// block's first pair. A pair of which the query attends one position takes its value with the
// other half zeroed: that position lies outside the query's (another query's row, or padding),
// and its probability 0 times an inf or NaN there would be NaN.
template <int QS, int C>
void BlockValues(const uint32_t* vt, int64_t dv, int64_t pairs_max, const int64_t* first,
                 const int64_t* rows, const uint32_t (*pp)[kSoftmaxBlock / 2], float* const* o,
                 int64_t c0, __mmask16 last) {
  __mmask16 mask[C];
  for (int cc = 0; cc < C; ++cc) mask[cc] = cc == C - 1 ? last : static_cast<__mmask16>(0xffff);
  __m512 acc[QS][C];
  for (int i = 0; i < QS; ++i)
    for (int cc = 0; cc < C; ++cc)
      acc[i][cc] = _mm512_maskz_loadu_ps(mask[cc], o[i] + c0 + 16 * cc);
  // Whole pairs every query of the tile attends (the whole block but on the diagonal and at a
  // window's start) run with no test; the rest per query: a whole pair, a half pair or nothing.
  int64_t pairs_lo = 0, pairs_all = pairs_max;
  for (int i = 0; i < QS; ++i) {
    pairs_lo = std::max(pairs_lo, (first[i] + 1) / 2);
    pairs_all = std::min(pairs_all, rows[i] / 2);
  }
  const __m512i low_halves = _mm512_set1_epi32(0xffff);
  const auto tested_pairs = [&](int64_t rp0, int64_t rp1) {
    for (int64_t rp = rp0; rp < rp1; ++rp) {
      const uint32_t* v = vt + rp * dv + c0;
      __m512i vv[C], low[C], high[C];  // the pair, and its first or second position's value alone
      for (int cc = 0; cc < C; ++cc) {
        vv[cc] = _mm512_maskz_loadu_epi32(mask[cc], v + 16 * cc);
        low[cc] = _mm512_and_si512(vv[cc], low_halves);
        high[cc] = _mm512_andnot_si512(low_halves, vv[cc]);
      }
      for (int i = 0; i < QS; ++i) {
        const bool lo = first[i] <= 2 * rp && 2 * rp < rows[i];
        const bool hi = first[i] <= 2 * rp + 1 && 2 * rp + 1 < rows[i];
        if (!lo && !hi) continue;
        const __m512bh pb = (__m512bh)_mm512_set1_epi32(static_cast<int32_t>(pp[i][rp]));
        for (int cc = 0; cc < C; ++cc) {
          const __m512i value = lo && hi ? vv[cc] : lo ? low[cc] : high[cc];
          acc[i][cc] = _mm512_dpbf16_ps(acc[i][cc], pb, (__m512bh)value);
        }
      }
    }
  };
  tested_pairs(0, std::min(pairs_lo, pairs_max));
  for (int64_t rp = pairs_lo; rp < pairs_all; ++rp) {
    const uint32_t* v = vt + rp * dv + c0;
    __m512bh vv[C];
    for (int cc = 0; cc < C; ++cc) {
      vv[cc] = (__m512bh)_mm512_maskz_loadu_epi32(mask[cc], v + 16 * cc);
    }
    for (int i = 0; i < QS; ++i) {
      const __m512bh pb = (__m512bh)_mm512_set1_epi32(static_cast<int32_t>(pp[i][rp]));
      for (int cc = 0; cc < C; ++cc) acc[i][cc] = _mm512_dpbf16_ps(acc[i][cc], pb, vv[cc]);
    }
  }
  tested_pairs(std::max(pairs_lo, pairs_all), pairs_max);
  for (int i = 0; i < QS; ++i)
    for (int cc = 0; cc < C; ++cc) _mm512_mask_storeu_ps(o[i] + c0 + 16 * cc, mask[cc], acc[i][cc]);
}

template <int QS>
void BlockValuesAll(const uint32_t* vt, int64_t dv, int64_t pairs_max, const int64_t* first,
                    const int64_t* rows, const uint32_t (*pp)[kSoftmaxBlock / 2],
                    float* const* o) {
  const int64_t full = dv / 16;
  const __mmask16 all = 0xffff, tail = TailMask(dv - full * 16);
  int64_t c = 0;
  for (; c + 4 <= full; c += 4)
    BlockValues<QS, 4>(vt, dv, pairs_max, first, rows, pp, o, c * 16, all);
  for (; c < full; ++c) BlockValues<QS, 1>(vt, dv, pairs_max, first, rows, pp, o, c * 16, all);
  if (tail != 0) BlockValues<QS, 1>(vt, dv, pairs_max, first, rows, pp, o, full * 16, tail);
}

}  // namespace
}  // namespace latent::kernels::avx512
