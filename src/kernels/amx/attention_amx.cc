// One query token's attention (kernels/attention.h) on AMX tiles under
// AttentionArgs::bf16_products, over bf16 or fp8 rows with one shared key/value head: MLA's
// absorbed decode (and DSA's over its selected rows), as FlashMLA runs it, with the token's heads
// as the rows of a tile. Per segment of positions (attention_common.h: sizes that depend on L
// only, run in parallel, merged in segment order), per block of 64 positions, per group of 16
// heads:
//
//   scores  S^T[64 positions][16 heads] = K[64][dq] . Q^T: 4 accumulator tiles of 16 positions,
//           one TDPBF16PS per 32 dims, in order, with the rows read in place as A tiles (16 rows
//           at one stride, as a paged block holds them; staged with zeros past dq or past the
//           segment otherwise); Q^T packed once per call as B tiles
//   softmax per head, 16 heads in the lanes of a vector: the running max, the rescale of the
//           head's output and sum, the probabilities over the block's positions in order,
//           rounded to bf16 and transposed into P [16 heads][64 positions]
//   values  O[16 heads][dv] += P . V (value_tiles.h), V the block's value rows interleaved in
//           pairs once per block for every head group
//
// fp8 rows (the cache's e4m3 encoding, kernels/row_format.h), as FlashMLA's fp8 decode reads them:
// each block's rows are decoded once into a stage, every element as the gather decodes it (the
// f32 code x scale, avx512::Fp8Rows) then rounded to bf16 (nearest even; NaN stays NaN; an f32
// denormal becomes 0, which TDPBF16PS would read as 0 anyway), and the block runs as over bf16
// rows holding those values, bit for bit. The rounding adds at most 2^-9 of an element to e4m3's
// own 2^-4; the vector kernels read fp8 rows with f32 products instead, at 2.2x the time of the
// part of a 32k decode step that grows with the context (docs/performance.md, "fp8 rows on AMX
// tiles").
//
// Each head's arithmetic depends on its query and rows only (a tile's rows are independent, and
// the padded heads of a last group are zero queries that nothing reads), so a token's result
// never depends on its batch; the bits are not the vdpbf16ps kernel's (attention_bf16.cc): the
// sums run in another order.
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/amx/amx_kernels.h"
#include "kernels/amx/amx_target.h"
#include "kernels/attention.h"
#include "kernels/kernel_table.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

LATENT_AMX_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/attention_common.h"
#include "kernels/avx512/bf16_rows.h"
#include "kernels/avx512/row_loads_avx512.h"
#include "kernels/amx/tile_blocks.h"
#include "kernels/amx/row_tiles.h"
#include "kernels/amx/value_tiles.h"

namespace latent::kernels::amx {
namespace {

constexpr int64_t kBlock = 64;      // positions per online-softmax step: 4 score tiles
constexpr int64_t kGroup = 16;      // heads per tile row group
constexpr int64_t kKeyRows = 16;    // positions per key tile

struct Dims {
  int64_t heads, groups, dq_tiles, dv;
  explicit Dims(const AttentionArgs& a)
      : heads(a.num_heads),
        groups((a.num_heads + kGroup - 1) / kGroup),
        dq_tiles((a.qk_dim + 31) / 32),
        dv(a.v_dim) {}
  int64_t padded_heads() const { return groups * kGroup; }
};

// qt [groups][dq_tiles] B tiles of Q^T: tile (g, kk) row p, column n = the bf16 pair of dims
// 32 kk + 2 p, + 1 of head 16 g + n (zero past qk_dim and past the heads).
void PackQueryTiles(const AttentionArgs& a, const Dims& d, uint32_t* qt) {
  for (int64_t g = 0; g < d.groups; ++g) {
    for (int64_t kk = 0; kk < d.dq_tiles; ++kk) {
      __m512i column[16], row[16];  // column[n]: head n's 16 pairs
      for (int64_t n = 0; n < kGroup; ++n) {
        const int64_t h = g * kGroup + n, c = kk * 32;
        if (h >= d.heads) {
          column[n] = _mm512_setzero_si512();
          continue;
        }
        const float* q = a.q + h * a.qk_dim + c;
        const int64_t count = std::clamp<int64_t>(a.qk_dim - c, 0, 32);
        const __m512 lo = _mm512_maskz_loadu_ps(avx512::TailMask(std::min<int64_t>(count, 16)), q);
        const __m512 hi =
            _mm512_maskz_loadu_ps(avx512::TailMask(std::max<int64_t>(count - 16, 0)), q + 16);
        column[n] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
      }
      avx512::Transpose16x16(column, row);
      uint32_t* tile = qt + (g * d.dq_tiles + kk) * kTileRows * 16;
      for (int64_t p = 0; p < kTileRows; ++p) _mm512_store_si512(tile + p * 16, row[p]);
    }
  }
}

// The 16-bit permutation that pairs two sources: lanes 2 k and 2 k + 1 take elements first + k
// and second + k (k < 16) of the 64 elements (v)permutex2var reads, or of the 32 permutexvar reads.
__m512i PairIndex(int first, int second) {
  alignas(64) uint16_t index[32];
  for (int k = 0; k < 16; ++k) {
    index[2 * k] = static_cast<uint16_t>(first + k);
    index[2 * k + 1] = static_cast<uint16_t>(second + k);
  }
  return _mm512_load_si512(index);
}

// vv [32 pairs][dv]: the bf16 value rows values[0 .. rows) interleaved in pairs (position 2 j in
// the low half), zero past `rows`.
void InterleaveValues(const void* const* values, int64_t dv, int64_t rows, uint32_t* vv) {
  // Columns c .. c + 15 and c + 16 .. c + 31 of the even row (elements 0-31) and the odd one
  // (32-63).
  const __m512i lo_index = PairIndex(0, 32), hi_index = PairIndex(16, 48);
  for (int64_t j = 0; j < kBlock / 2; ++j) {
    uint32_t* dst = vv + j * dv;
    if (2 * j >= rows) {
      std::memset(dst, 0, dv * sizeof(uint32_t));
      continue;
    }
    const auto* even = static_cast<const uint16_t*>(values[2 * j]);
    const auto* odd =
        2 * j + 1 < rows ? static_cast<const uint16_t*>(values[2 * j + 1]) : nullptr;
    for (int64_t c = 0; c < dv; c += 32) {
      const int64_t count = std::min<int64_t>(32, dv - c);  // 16 or 32: dv is whole tiles
      const __mmask32 m = count == 32 ? ~__mmask32{0} : (__mmask32{1} << count) - 1;
      const __m512i e = _mm512_maskz_loadu_epi16(m, even + c);
      const __m512i o =
          odd != nullptr ? _mm512_maskz_loadu_epi16(m, odd + c) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + c, _mm512_permutex2var_epi16(e, lo_index, o));
      if (count == 32) {
        _mm512_storeu_si512(dst + c + 16, _mm512_permutex2var_epi16(e, hi_index, o));
      }
    }
  }
}

// Elements [c, c + 16) of an fp8-encoded row as the gather's f32 values, zero from `dim` on.
__m512 DecodedChunk(const RowFormat& f, const uint8_t* row, int64_t c, int64_t dim) {
  if (c >= dim) return _mm512_setzero_ps();
  if (c + 16 <= dim) return avx512::Fp8Rows::Full(f, row, c);
  return avx512::Fp8Rows::Part(f, row, c, avx512::TailMask(dim - c));
}

// The fp8 rows src[0 .. rows) (format f, `dim` elements read) decoded and rounded to bf16 into
// `stage`, rows `stride` values apart, each zero from dim to whole tiles of 32, then zero rows up
// to `padded` (whole key tiles); ptrs[r] -> staged row r. (A stride's spare tile, which keeps
// rows off one L1 set, is never read.)
void StageFp8Rows(const RowFormat& f, const void* const* src, int64_t rows, int64_t padded,
                  int64_t dim, int64_t stride, uint16_t* stage, const void** ptrs) {
  const int64_t tiles_dim = (dim + 31) / 32 * 32;
  for (int64_t r = 0; r < padded; ++r) {
    uint16_t* dst = stage + r * stride;
    ptrs[r] = dst;
    if (r >= rows) {
      std::memset(dst, 0, tiles_dim * sizeof(uint16_t));
      continue;
    }
    const auto* row = static_cast<const uint8_t*>(src[r]);
    for (int64_t c = 0; c < tiles_dim; c += 32) {
      const __m512 lo = DecodedChunk(f, row, c, dim), hi = DecodedChunk(f, row, c + 16, dim);
      _mm512_storeu_si512(dst + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

// One segment's running state per padded head: max, sum, unnormalised output [dv].
struct SegmentState {
  float* mx;
  float* sum;
  float* acc;
};

// Positions [t0, t1) for every head group: the segment's state, from scratch.
void SegmentAmx(const AttentionArgs& a, const Dims& d, const uint32_t* qt, int64_t t0,
                int64_t t1, const SegmentState& st) {
  const int64_t hp = d.padded_heads(), dv = d.dv;
  std::fill(st.mx, st.mx + hp, -INFINITY);
  std::fill(st.sum, st.sum + hp, 0.0f);
  std::fill(st.acc, st.acc + hp * dv, 0.0f);
  thread_local std::vector<uint16_t> stage_buffer, fp8_buffer;
  thread_local std::vector<uint32_t> vv_buffer;
  thread_local std::vector<float> s_buffer;
  thread_local std::vector<uint32_t> p_buffer;
  const int64_t stage_rows = kKeyRows * StagedRowValues(d.dq_tiles);
  uint16_t* stage = Aligned64(stage_buffer, 4 * stage_rows);        // 4 key tiles' rows
  // fp8 rows: the block's keys, and its values where they are other rows, decoded to bf16.
  const bool fp8 = a.rows.dtype == DType::kF8E4M3;
  const bool own_values = a.values != a.keys;
  const int64_t key_stride = StagedRowValues(d.dq_tiles);
  const int64_t value_stride = StagedRowValues((dv + 31) / 32);
  uint16_t* fp8_keys = nullptr;        // [64 rows][key_stride]
  uint16_t* fp8_value_rows = nullptr;  // [64 rows][value_stride]
  if (fp8) {
    fp8_keys = Aligned64(fp8_buffer, kBlock * (key_stride + (own_values ? value_stride : 0)));
    fp8_value_rows = fp8_keys + kBlock * key_stride;
  }
  const void* staged_keys[kBlock];
  const void* staged_values[kBlock];
  uint32_t* vv = Aligned64(vv_buffer, kBlock / 2 * dv);             // [32 pairs][dv]
  float* s = Aligned64(s_buffer, kBlock * kGroup);                  // [64 positions][16 heads]
  uint32_t* p = Aligned64(p_buffer, 2 * kGroup * 16);               // 2 x [16 heads][16 pairs]
  const __m512 scale = _mm512_set1_ps(a.scale);
  const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
  const __m512i interleave = PairIndex(0, 16);  // head h of the even and the odd position
  ConfigureTiles(kTileRows);
  for (int64_t tb = t0; tb < t1; tb += kBlock) {
    const int64_t rows = std::min(kBlock, t1 - tb);
    const int64_t key_tiles = (rows + kKeyRows - 1) / kKeyRows;
    const void* const* key_rows = a.keys + tb;
    const void* const* value_rows = a.values + tb;
    int64_t key_count = rows, key_dim = a.qk_dim;  // real rows and their dim for RowsAsTiles
    if (fp8) {  // decoded rows at one stride, zero past the dim and to whole tiles: in place
      StageFp8Rows(a.rows, key_rows, rows, key_tiles * kKeyRows, a.qk_dim, key_stride, fp8_keys,
                   staged_keys);
      key_rows = staged_keys;
      key_count = key_tiles * kKeyRows;
      key_dim = d.dq_tiles * 32;
      value_rows = staged_keys;  // the value is the key row's prefix ...
      if (own_values) {          // ... unless the values are rows of their own
        StageFp8Rows(a.rows, a.values + tb, rows, rows, dv, value_stride, fp8_value_rows,
                     staged_values);
        value_rows = staged_values;
      }
    }
    const uint8_t* keys[4];
    int64_t ld[4];
    for (int64_t kt = 0; kt < key_tiles; ++kt) {
      keys[kt] = RowsAsTiles(key_rows, kt * kKeyRows, std::min(kKeyRows, key_count - kt * kKeyRows),
                             key_dim, d.dq_tiles, stage + kt * stage_rows, &ld[kt]);
    }
    InterleaveValues(value_rows, dv, rows, vv);
    for (int64_t g = 0; g < d.groups; ++g) {
      // Scores: tiles 0-3 the key tiles' positions x the group's heads.
      const uint32_t* qg = qt + g * d.dq_tiles * kTileRows * 16;
      _tile_zero(0);
      if (key_tiles > 1) _tile_zero(1);
      if (key_tiles > 2) _tile_zero(2);
      if (key_tiles > 3) _tile_zero(3);
      for (int64_t kk = 0; kk < d.dq_tiles; ++kk) {
        _tile_loadd(7, qg + kk * kTileRows * 16, kTileRowBytes);
        const int64_t at = kk * kTileRowBytes;
        _tile_loadd(4, keys[0] + at, ld[0]);
        _tile_dpbf16ps(0, 4, 7);
        if (key_tiles > 1) {
          _tile_loadd(5, keys[1] + at, ld[1]);
          _tile_dpbf16ps(1, 5, 7);
        }
        if (key_tiles > 2) {
          _tile_loadd(6, keys[2] + at, ld[2]);
          _tile_dpbf16ps(2, 6, 7);
        }
        if (key_tiles > 3) {
          _tile_loadd(4, keys[3] + at, ld[3]);
          _tile_dpbf16ps(3, 4, 7);
        }
      }
      constexpr int64_t s_ld = kGroup * 4;
      _tile_stored(0, s, s_ld);
      if (key_tiles > 1) _tile_stored(1, s + 16 * kGroup, s_ld);
      if (key_tiles > 2) _tile_stored(2, s + 32 * kGroup, s_ld);
      if (key_tiles > 3) _tile_stored(3, s + 48 * kGroup, s_ld);

      // Softmax, the group's heads in the lanes: the block's max, then the rescale.
      float* mx = st.mx + g * kGroup;
      float* sum = st.sum + g * kGroup;
      float* acc = st.acc + g * kGroup * dv;
      __m512 block_max = minus_inf;
      for (int64_t r = 0; r < rows; ++r) {
        const __m512 v = _mm512_mul_ps(_mm512_load_ps(s + r * kGroup), scale);
        _mm512_store_ps(s + r * kGroup, v);
        block_max = _mm512_max_ps(block_max, v);
      }
      const __m512 old_max = _mm512_loadu_ps(mx);
      const __m512 new_max = _mm512_max_ps(old_max, block_max);
      // Heads whose max grew rescale; those whose every score so far is -inf hold nothing yet.
      const __mmask16 grew = _mm512_cmp_ps_mask(new_max, old_max, _CMP_GT_OQ) &
                             _mm512_cmp_ps_mask(old_max, minus_inf, _CMP_NEQ_OQ);
      if (grew != 0) {
        alignas(64) float factor[16];
        _mm512_store_ps(factor, avx512::Exp(_mm512_sub_ps(old_max, new_max)));
        _mm512_storeu_ps(sum, _mm512_mask_mul_ps(_mm512_loadu_ps(sum), grew,
                                                 _mm512_loadu_ps(sum), _mm512_load_ps(factor)));
        for (int64_t h = 0; h < kGroup; ++h) {
          if ((grew >> h) & 1) avx512::ScaleRow(acc + h * dv, dv, factor[h]);
        }
      }
      _mm512_storeu_ps(mx, new_max);
      // Every score so far -inf: exp(-inf - -inf) would be NaN; they weigh 0 against max 0.
      const __m512 base = _mm512_mask_blend_ps(
          _mm512_cmp_ps_mask(new_max, minus_inf, _CMP_EQ_OQ), new_max, _mm512_setzero_ps());
      // The probabilities, in position order, then as bf16 pairs per head, transposed.
      __m512 total = _mm512_setzero_ps();
      __m512i pairs[2][16];
      for (int64_t j = 0; j < kBlock / 2; ++j) {
        __m512 e[2];
        for (int64_t k = 0; k < 2; ++k) {
          const int64_t r = 2 * j + k;
          e[k] = r < rows ? avx512::Exp(_mm512_sub_ps(_mm512_load_ps(s + r * kGroup), base))
                          : _mm512_setzero_ps();
          total = _mm512_add_ps(total, e[k]);
        }
        pairs[j / 16][j % 16] =
            _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(e[1], e[0]));
      }
      _mm512_storeu_ps(sum, _mm512_add_ps(_mm512_loadu_ps(sum), total));
      for (int64_t half = 0; half < 2; ++half) {
        __m512i line[16];
        avx512::Transpose16x16(pairs[half], line);
        for (int64_t h = 0; h < kGroup; ++h) {
          _mm512_store_si512(p + (half * kGroup + h) * 16, line[h]);
        }
      }
      _tile_loadd(4, p, kTileRowBytes);
      _tile_loadd(5, p + kGroup * 16, kTileRowBytes);
      AddValueProducts(vv, dv, acc);
    }
  }
  _tile_release();
}

// Copies the first `heads` of each field of a padded segment state into the layout
// avx512::MergeSegments reads: max [h], sum [h], acc [h, dv].
void CompactState(const Dims& d, const SegmentState& st, float* out) {
  std::copy(st.mx, st.mx + d.heads, out);
  std::copy(st.sum, st.sum + d.heads, out + d.heads);
  std::copy(st.acc, st.acc + d.heads * d.dv, out + 2 * d.heads);
}

void AttentionAmx(const AttentionArgs& a) {
  const Dims d(a);
  const int64_t h = a.num_heads, dv = a.v_dim, hp = d.padded_heads();
  if (a.length <= 0) {
    std::fill(a.out, a.out + h * dv, 0.0f);
    return;
  }
  thread_local std::vector<uint32_t> qt_buffer;
  uint32_t* qt = Aligned64(qt_buffer, d.groups * d.dq_tiles * kTileRows * 16);
  PackQueryTiles(a, d, qt);
  const int64_t seg_rows = avx512::SegmentRows(a.length);
  const int64_t segments = (a.length + seg_rows - 1) / seg_rows;
  const int64_t padded = hp * (dv + 2);   // a segment's padded state
  const int64_t compact = h * (dv + 2);   // what MergeSegments reads
  thread_local std::vector<float> work_buffer;
  float* work = Aligned64(work_buffer, segments * (padded + compact));
  float* states = work;                       // [segments][padded]
  float* merged = work + segments * padded;  // [segments][compact]
  auto run = [&](int64_t s) {
    float* at = states + s * padded;
    const SegmentState st{at, at + hp, at + 2 * hp};
    SegmentAmx(a, d, qt, s * seg_rows, std::min(a.length, (s + 1) * seg_rows), st);
    return st;
  };
  if (segments == 1) {
    const SegmentState st = run(0);
    std::copy(st.acc, st.acc + h * dv, a.out);
    for (int64_t i = 0; i < h; ++i) {
      avx512::DivideRow(a.out + i * dv, dv, SinkDenominator(a.sinks, i, st.mx[i], st.sum[i]));
    }
    return;
  }
  threads::ParallelFor(segments, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) CompactState(d, run(s), merged + s * compact);
  });
  avx512::MergeSegments(a, merged, segments, compact);
}

}  // namespace

bool AmxTakesAttention(const AttentionArgs& a) {
  const bool rows = a.rows.dtype == DType::kBF16 ||
                    (a.rows.dtype == DType::kF8E4M3 && RowsReadInPlace(a.rows));
  return a.bf16_products && rows && a.key_head_stride == 0 &&
         a.value_head_stride == 0 && a.qk_dim > 0 && a.v_dim > 0 && a.v_dim % 16 == 0;
}

void AttentionBf16Amx(const AttentionArgs& a) { AttentionAmx(a); }

void FillAmxAttention(KernelTable& t) {
  static void (*wrapped)(const AttentionArgs&) = nullptr;  // the table's kernel before
  wrapped = t.attention;
  t.attention = [](const AttentionArgs& a) {
    if (AmxTakesAttention(a)) {
      AttentionAmx(a);
    } else {
      wrapped(a);
    }
  };
}

}  // namespace latent::kernels::amx
LATENT_AMX_END
