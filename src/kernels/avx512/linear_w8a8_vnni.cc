// W8A8 linear with AVX512-VNNI vpdpbusd (`--quantize w8a8`; the math is kernels/weight_ref.h's
// row_sums and ref/linear_w8a8_ref.cc): int8 weights [n, k] row-major with f32 row scales, and
// activations quantized per row at each call by the same rule as the weights
// (kernels/quantize_row.h), computed here with the same f32 operations, so the same bits.
//
// vpdpbusd multiplies u8 by s8: the activations are stored as xq + 128 (u8, padded with 128 to a
// multiple of 64 columns, the weights' tail loads masked to 0), so each 16-lane int32 accumulator
// sums (xq + 128) * q over its columns, and
//
//   dot[m, r] = (sum of the accumulator's lanes) - 128 * row_sums[r] = sum over c of xq * q
//   y[m, r]   = float(dot[m, r]) * (sx[m] * s[r])
//
// Integer sums are exact in any order, so tiles, the k-tail and the thread split never change a
// result: the output equals the reference's bit for bit and is batch invariant; the activation
// row's quantization depends on that row alone. The final float formula is the reference's.
//
// This kernel reads the rows as stored (tests; weights the table did not pack). The loader packs
// every W8A8 weight for the tables with VNNI, whose linear then runs linear_w8a8_vnni_packed.cc.
//
// Shapes: decode (m <= 4) streams the weights once, MT = m rows x 8 (or 4) weight rows per tile
// with software prefetch; batches keep blocks of activation rows in L2 and run 6 x 4 register
// tiles (24 int32 accumulators) over all of k, each 4-row weight tile read from memory by the
// block's first M-tile and from L1 by the others.
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/activation_rows.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/vnni_target.h"
#include "kernels/kernel_table.h"
#include "kernels/ref/linear_w8a8_ref.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

LATENT_VNNI_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/quantize_u8.h"

namespace latent::kernels::avx512 {
namespace {

decltype(KernelTable::linear) g_next_linear = nullptr;  // every other weight goes here

constexpr int64_t kChunk = 64;       // k columns per vpdpbusd (64 u8 x 64 s8 -> 16 int32)
constexpr int64_t kMtDecode = 4;     // m <= this: decode tiles
constexpr int kMt = 6;               // batches: activation rows per tile
constexpr int kNt = 4;               // batches: weight rows per tile
constexpr int64_t kPrefetch = 4096;  // decode: prefetch distance in bytes within a row
constexpr int64_t kBlockBytes = int64_t{512} << 10;  // batches: activation bytes per L2 block

struct Job {
  const uint8_t* x;  // [m, kp] u8 = xq + 128, padded with 128 (xq = 0)
  const float* sx;   // [m] activation row scales
  int64_t kp, m;
  const int8_t* q;  // [n, k] this view's rows
  int64_t n, k;
  const uint8_t* scale;     // f32 [n] (this view's rows), possibly unaligned
  const int32_t* row_sums;  // [n] (this view's rows)
  float* y;                 // [m, n]
};

inline __mmask64 TailMask64(int64_t count) {  // count in [1, 64]
  return count >= 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
}

inline float Scale(const Job& j, int64_t row) {
  float s;
  std::memcpy(&s, j.scale + 4 * row, 4);
  return s;
}

// y[row, r] for one weight row r from its accumulator: the reference's formula.
inline void Store1(const Job& j, int64_t row, int64_t r, __m512i acc) {
  const int32_t dot = _mm512_reduce_add_epi32(acc) - 128 * j.row_sums[r];
  j.y[row * j.n + r] = static_cast<float>(dot) * (j.sx[row] * Scale(j, r));
}

// y[row, r0 .. r0 + 3] from four accumulators: a transposing add tree leaves lane i of the
// 128-bit result = the lane sum of acc[i]; then the same per-lane formula as Store1.
inline void Store4(const Job& j, int64_t row, int64_t r0, const __m512i* acc) {
  const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[0], acc[1]),
                                       _mm512_unpackhi_epi32(acc[0], acc[1]));
  const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[2], acc[3]),
                                       _mm512_unpackhi_epi32(acc[2], acc[3]));
  const __m512i s = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23),
                                     _mm512_unpackhi_epi64(s01, s23));
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
  __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  const __m128i sums = _mm_loadu_si128(reinterpret_cast<const __m128i*>(j.row_sums + r0));
  sum = _mm_sub_epi32(sum, _mm_slli_epi32(sums, 7));
  const __m128 sw = _mm_loadu_ps(reinterpret_cast<const float*>(j.scale + 4 * r0));
  const __m128 y = _mm_mul_ps(_mm_cvtepi32_ps(sum), _mm_mul_ps(_mm_set1_ps(j.sx[row]), sw));
  _mm_storeu_ps(j.y + row * j.n + r0, y);
}

// MT activation rows (from m0) x NT weight rows (from n0) over all of k. `lead`: prefetch these
// rows kPrefetch ahead (they stream from memory); `next`: prefetch the next tile's rows at the
// same offsets.
template <int MT, int NT>
void Tile(const Job& j, int64_t m0, int64_t n0, bool lead, bool next) {
  const int8_t* rows[NT];
  for (int b = 0; b < NT; ++b) rows[b] = j.q + (n0 + b) * j.k;
  const uint8_t* xs[MT];
  for (int a = 0; a < MT; ++a) xs[a] = j.x + (m0 + a) * j.kp;
  const int64_t ahead = NT * j.k;
  __m512i acc[MT][NT];
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_setzero_si512();
  int64_t c = 0;
  for (; c + kChunk <= j.k; c += kChunk) {
    if (lead) {
      for (int b = 0; b < NT; ++b)
        _mm_prefetch(reinterpret_cast<const char*>(rows[b] + c + kPrefetch), _MM_HINT_T0);
    }
    if (next) {
      for (int b = 0; b < NT; ++b)
        _mm_prefetch(reinterpret_cast<const char*>(rows[b] + c + ahead), _MM_HINT_T0);
    }
    __m512i w[NT];
    for (int b = 0; b < NT; ++b) w[b] = _mm512_loadu_si512(rows[b] + c);
    for (int a = 0; a < MT; ++a) {
      const __m512i xv = InRegister(_mm512_loadu_si512(xs[a] + c));
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_dpbusd_epi32(acc[a][b], xv, w[b]);
    }
  }
  if (c < j.k) {  // weights masked to 0 past k; the activations are padded (never read past kp)
    const __mmask64 mask = TailMask64(j.k - c);
    __m512i w[NT];
    for (int b = 0; b < NT; ++b) w[b] = _mm512_maskz_loadu_epi8(mask, rows[b] + c);
    for (int a = 0; a < MT; ++a) {
      const __m512i xv = _mm512_loadu_si512(xs[a] + c);
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_dpbusd_epi32(acc[a][b], xv, w[b]);
    }
  }
  for (int a = 0; a < MT; ++a) {
    if constexpr (NT % 4 == 0) {
      for (int b = 0; b < NT; b += 4) Store4(j, m0 + a, n0 + b, &acc[a][b]);
    } else {
      for (int b = 0; b < NT; ++b) Store1(j, m0 + a, n0 + b, acc[a][b]);
    }
  }
}

template <int NT>
void TileAnyM(const Job& j, int64_t m0, int64_t mt, int64_t n0, bool lead, bool next) {
  WithRowCount<6>(mt, [&]<int MT>() { Tile<MT, NT>(j, m0, n0, lead, next); });
}

// Decode (m <= 4): every weight row read once, straight from memory.
void RowsDecode(const Job& j, int64_t r0, int64_t r1) {
  int64_t n = r0;
  if (j.m <= 2) {
    for (; n + 8 <= r1; n += 8) TileAnyM<8>(j, 0, j.m, n, true, false);
  }
  for (; n + 4 <= r1; n += 4) TileAnyM<4>(j, 0, j.m, n, true, false);
  for (; n < r1; ++n) TileAnyM<1>(j, 0, j.m, n, true, false);
}

// Batches: weight rows [r0, r1) against blocks of activation rows that stay in L2.
void RowsBatch(const Job& j, int64_t r0, int64_t r1) {
  const int64_t most = std::max<int64_t>(2 * kMt, kBlockBytes / std::max<int64_t>(j.kp, 1) / kMt * kMt);
  BlockedRows<kMt, kNt>(j.m, most, r0, r1,
                        [&]<int NT>(int64_t m0, int64_t mt, int64_t n0, bool lead, bool next) {
                          TileAnyM<NT>(j, m0, mt, n0, lead, next);
                        });
}

void LinearW8A8(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  Job j;
  j.kp = (w.k + kChunk - 1) / kChunk * kChunk;
  const int64_t k = w.k, kp = j.kp;
  const auto [xu, sx] =
      QuantizeActivationRows<uint8_t>(x, m, k, kp, [k, kp](const float* row, uint8_t* out) {
        return QuantizeRowU8(row, k, kp, out);
      });
  const int64_t threads = threads::NumThreads();
  j.x = xu;
  j.sx = sx;
  j.m = m;
  j.q = static_cast<const int8_t*>(w.data);
  j.n = w.n;
  j.k = w.k;
  j.scale = static_cast<const uint8_t*>(w.scale) + 4 * w.scale_row0;
  j.row_sums = w.row_sums + w.scale_row0;
  j.y = y;
  const bool decode = m <= kMtDecode;
  const auto rows = [&j, decode](int64_t r0, int64_t r1) {
    if (decode) {
      RowsDecode(j, r0, r1);
    } else {
      RowsBatch(j, r0, r1);
    }
  };
  // Chunks of whole tiles with about 128 KiB of weights each, at least 4 per thread.
  const int64_t tile = decode ? 8 : kNt;
  int64_t grain = std::max<int64_t>(tile, (int64_t{128} << 10) / std::max<int64_t>(j.k, 1));
  grain = std::min(grain, (j.n + 4 * threads - 1) / (4 * threads));
  grain = std::max<int64_t>(tile, (grain + tile - 1) / tile * tile);
  const double work = static_cast<double>(j.n) * static_cast<double>(j.k) * static_cast<double>(m);
  if (threads == 1 || work < 32768.0 || grain >= j.n) {
    rows(0, j.n);
    return;
  }
  threads::ParallelFor(j.n, grain, rows);
}

void LinearW8A8OrNext(const float* x, int64_t m, const WeightRef& w, float* y, float* scratch) {
  if (w.dtype != DType::kI8 || w.row_sums == nullptr) return g_next_linear(x, m, w, y, scratch);
  if (!IsW8A8(w)) return LinearW8A8Ref(x, m, w, y);  // (it rejects the layout)
  if (w.ReadsPacked(PackedLayout::kW8A8QuadTiles)) return LinearW8A8VnniPacked(x, m, w, y);
  LinearW8A8(x, m, w, y);
}

}  // namespace

void FillW8A8VnniLinear(KernelTable& t) {
  g_next_linear = t.linear;
  t.linear = LinearW8A8OrNext;
  AddPacking<IsW8A8, W8A8VnniPackedBytes, W8A8VnniPack, PackedLayout::kW8A8QuadTiles>(t);
}

}  // namespace latent::kernels::avx512
LATENT_VNNI_END
