// AVX-512 linear, transposed linear and dequant_row over int8 weights with one f32 scale per row
// (DType::kI8, `--quantize int8`; see kernels/weight_ref.h). FillInt8Kernels wraps the table's
// linear kernels: I8 weights come here, every other dtype goes on to the kernels it wrapped.
//
// Decode is memory-bound: the int8 weights are streamed once, widened to f32 in registers
// (vpmovsxbd + vcvtdq2ps, exact) and FMAed with the f32 activations; the row scale is applied
// once per output: y[m, r] = s[r] * ReduceAdd(acc[m, r]).
//
// Summation order (batch invariance): every output is one f32x16 accumulator, zeroed, then
// fma(x[m, chunk], float(q[r, chunk]), acc) over the 16-wide chunks of k in order (the last one
// masked), then ReduceAdd, then times s[r]. Decode (m <= 4) keeps the accumulators in registers
// over all of k; batches (m > 4) go through k in 512-column segments, each converted to f32 once
// into a stack buffer and used by all activation rows of the block, carrying the accumulators
// between segments. Both compute the same sequence, whatever m, the tiling or the thread, so a
// token's output never depends on its batch.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/ref/linear_w8a8_ref.h"
#include "threads/thread_pool.h"
// Last: defines the AVX-512 helpers under the target pragma.
#include "kernels/avx512/avx512_common.h"

LATENT_AVX512_BEGIN
namespace latent::kernels::avx512 {
namespace {

// The kernels FillInt8Kernels wrapped: every dtype but I8 goes to them.
decltype(KernelTable::linear) g_next_linear = nullptr;
decltype(KernelTable::dequant_row) g_next_dequant_row = nullptr;
decltype(KernelTable::transposed_linear) g_next_transposed_linear = nullptr;

constexpr int64_t kMtDecode = 4;     // m <= this: decode tiles, accumulators in registers
constexpr int64_t kMb = 32;          // batches: activation rows per block (at most)
constexpr int kNtBatch = 4;          // batches: weight rows per tile
constexpr int64_t kSegment = 512;    // batches: columns per k-segment (a multiple of 16)
constexpr int64_t kPrefetch = 4096;  // decode: software prefetch distance in bytes

struct Job {
  const float* x;
  int64_t m;
  const int8_t* q;  // [n, k]
  int64_t n, k;
  const uint8_t* scale;  // f32 [n] (this view's rows), possibly unaligned
  float* y;
};

inline float Scale(const Job& j, int64_t row) {
  float s;
  std::memcpy(&s, j.scale + 4 * row, 4);
  return s;
}

inline __m512 WidenI8(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)); }
inline __m512 LoadI8(const int8_t* p) {
  return WidenI8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m512 LoadI8Part(const int8_t* p, __mmask16 m) {
  return WidenI8(_mm_maskz_loadu_epi8(m, p));
}

// Decode tile: MT activation rows x NT weight rows over all of k.
template <int MT, int NT>
void TileDecode(const Job& j, int64_t n0) {
  const int8_t* rows[NT];
  for (int b = 0; b < NT; ++b) rows[b] = j.q + (n0 + b) * j.k;
  const float* xs[MT];
  for (int a = 0; a < MT; ++a) xs[a] = j.x + a * j.k;
  __m512 acc[MT][NT];
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= j.k; c += 16) {
    if ((c & 63) == 0) {  // one prefetch per new cache line
      for (int b = 0; b < NT; ++b)
        _mm_prefetch(reinterpret_cast<const char*>(rows[b] + c + kPrefetch), _MM_HINT_T0);
    }
    __m512 w[NT];
    for (int b = 0; b < NT; ++b) w[b] = LoadI8(rows[b] + c);
    for (int a = 0; a < MT; ++a) {
      const __m512 xv = InRegister(_mm512_loadu_ps(xs[a] + c));
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_fmadd_ps(xv, w[b], acc[a][b]);
    }
  }
  if (c < j.k) {
    const __mmask16 mask = TailMask(j.k - c);
    __m512 w[NT];
    for (int b = 0; b < NT; ++b) w[b] = LoadI8Part(rows[b] + c, mask);
    for (int a = 0; a < MT; ++a) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, xs[a] + c);
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_fmadd_ps(xv, w[b], acc[a][b]);
    }
  }
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) j.y[a * j.n + n0 + b] = ReduceAdd(acc[a][b]) * Scale(j, n0 + b);
}

template <int MT>
void RowsDecode(const Job& j, int64_t r0, int64_t r1) {
  constexpr int kTile = MT == 1 ? 8 : 4;
  int64_t n = r0;
  for (; n + kTile <= r1; n += kTile) TileDecode<MT, kTile>(j, n);
  for (; n + 2 <= r1; n += 2) TileDecode<MT, 2>(j, n);
  if (n < r1) TileDecode<MT, 1>(j, n);
}

// Batches: MT activation rows (from m0) x NT staged f32 weight rows over the segment [c0, c1);
// `io` carries the accumulators ([MT][kNtBatch], row stride kNtBatch) between segments.
template <int MT, int NT>
void TileSegment(const Job& j, int64_t m0, int64_t c0, int64_t c1, const float* stage, __m512* io,
                 bool first) {
  const float* xs[MT];
  for (int a = 0; a < MT; ++a) xs[a] = j.x + (m0 + a) * j.k;
  __m512 acc[MT][NT];
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) acc[a][b] = first ? _mm512_setzero_ps() : io[a * kNtBatch + b];
  int64_t c = c0;
  for (; c + 16 <= c1; c += 16) {
    __m512 w[NT];
    for (int b = 0; b < NT; ++b) w[b] = _mm512_load_ps(stage + b * kSegment + (c - c0));
    for (int a = 0; a < MT; ++a) {
      const __m512 xv = InRegister(_mm512_loadu_ps(xs[a] + c));
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_fmadd_ps(xv, w[b], acc[a][b]);
    }
  }
  if (c < c1) {  // the last chunk of k: the stage holds zeros past k
    const __mmask16 mask = TailMask(c1 - c);
    __m512 w[NT];
    for (int b = 0; b < NT; ++b) w[b] = _mm512_load_ps(stage + b * kSegment + (c - c0));
    for (int a = 0; a < MT; ++a) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, xs[a] + c);
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_fmadd_ps(xv, w[b], acc[a][b]);
    }
  }
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) io[a * kNtBatch + b] = acc[a][b];
}

template <int NT>
void TileSegmentAnyM(const Job& j, int64_t m0, int64_t mt, int64_t c0, int64_t c1,
                     const float* stage, __m512* io, bool first) {
  WithRowCount<4>(mt, [&]<int MT>() { TileSegment<MT, NT>(j, m0, c0, c1, stage, io, first); });
}

// Weight rows [n0, n0 + NT) against activation rows [m0, m1) (at most kMb).
template <int NT>
void TileBatch(const Job& j, int64_t n0, int64_t m0, int64_t m1) {
  alignas(64) __m512 io[kMb * kNtBatch];
  alignas(64) float stage[NT * kSegment];
  for (int64_t c0 = 0; c0 < j.k; c0 += kSegment) {
    const int64_t c1 = std::min(j.k, c0 + kSegment);
    const int64_t next = c1 < j.k ? c1 : -1;  // the next segment, prefetched while converting
    for (int b = 0; b < NT; ++b) {
      const int8_t* row = j.q + (n0 + b) * j.k;
      float* out = stage + b * kSegment;
      for (int64_t c = c0; c < c1; c += 16) {
        if (next >= 0 && (c & 63) == 0)
          _mm_prefetch(reinterpret_cast<const char*>(row + next + (c - c0)), _MM_HINT_T0);
        const __m512 w = c + 16 <= c1 ? LoadI8(row + c) : LoadI8Part(row + c, TailMask(c1 - c));
        _mm512_store_ps(out + (c - c0), w);
      }
    }
    for (int64_t m = m0; m < m1; m += 4) {
      TileSegmentAnyM<NT>(j, m, std::min<int64_t>(4, m1 - m), c0, c1, stage,
                          &io[(m - m0) * kNtBatch], c0 == 0);
    }
  }
  for (int64_t m = m0; m < m1; ++m)
    for (int b = 0; b < NT; ++b)
      j.y[m * j.n + n0 + b] = ReduceAdd(io[(m - m0) * kNtBatch + b]) * Scale(j, n0 + b);
}

void Rows(const Job& j, int64_t r0, int64_t r1) {
  if (j.m <= kMtDecode) {
    WithRowCount<kMtDecode>(j.m, [&]<int MT>() { RowsDecode<MT>(j, r0, r1); });
    return;
  }
  for (int64_t m0 = 0; m0 < j.m; m0 += kMb) {
    const int64_t m1 = std::min(j.m, m0 + kMb);
    for (int64_t n = r0; n < r1; n += kNtBatch) {
      switch (std::min<int64_t>(kNtBatch, r1 - n)) {
        case 4:
          TileBatch<4>(j, n, m0, m1);
          break;
        case 3:
          TileBatch<3>(j, n, m0, m1);
          break;
        case 2:
          TileBatch<2>(j, n, m0, m1);
          break;
        default:
          TileBatch<1>(j, n, m0, m1);
          break;
      }
    }
  }
}

// The layout this file handles: per-row f32 scales. Anything else goes to the reference.
bool PerRowF32(const WeightRef& w) {
  return w.scale != nullptr && w.scale_dtype == DType::kF32 && w.block_n == 1 && w.block_k == w.k;
}

Job MakeJob(const float* x, int64_t m, const WeightRef& w, float* y) {
  Job j;
  j.x = x;
  j.m = m;
  j.q = static_cast<const int8_t*>(w.data);
  j.n = w.n;
  j.k = w.k;
  j.scale = static_cast<const uint8_t*>(w.scale) + 4 * w.scale_row0;
  j.y = y;
  return j;
}

void LinearI8(const float* x, int64_t m, const WeightRef& w, float* y, float* scratch) {
  if (w.dtype != DType::kI8) return g_next_linear(x, m, w, y, scratch);
  // W8A8 weights (row_sums) reach this only without AVX512-VNNI: the AVX2 kernel's exact integer
  // dot (every AVX-512 CPU has AVX2; without VNNI these tables pack no W8A8 weight).
  if (IsW8A8(w)) return avx2::LinearW8A8(x, m, w, y);
  if (!PerRowF32(w) || w.row_sums != nullptr) return RefKernels().linear(x, m, w, y, scratch);
  if (m <= 0 || w.n <= 0) return;
  const Job j = MakeJob(x, m, w, y);
  const auto rows = [&j](int64_t r0, int64_t r1) { Rows(j, r0, r1); };
  // Chunks of whole tiles with about 128 KiB of weights each, at least 4 per thread.
  const int64_t tile = j.m <= kMtDecode ? 8 : kNtBatch;
  const int64_t threads = threads::NumThreads();
  int64_t grain = std::max<int64_t>(tile, (int64_t{128} << 10) / std::max<int64_t>(j.k, 1));
  grain = std::min(grain, (j.n + 4 * threads - 1) / (4 * threads));
  grain = std::max<int64_t>(tile, (grain + tile - 1) / tile * tile);
  const double work =
      static_cast<double>(j.n) * static_cast<double>(j.k) * static_cast<double>(j.m);
  if (threads == 1 || work < 32768.0 || grain >= j.n) {
    rows(0, j.n);
    return;
  }
  threads::ParallelFor(j.n, grain, rows);
}

// out[c] = float(q[row, c]) * s[row]: the reference's product, so the same bits.
void DequantRowI8(const WeightRef& w, int64_t row, float* out) {
  if (w.dtype != DType::kI8) return g_next_dequant_row(w, row, out);
  if (!PerRowF32(w)) return RefKernels().dequant_row(w, row, out);
  const Job j = MakeJob(nullptr, 0, w, nullptr);
  const int8_t* p = j.q + row * j.k;
  const __m512 s = _mm512_set1_ps(Scale(j, row));
  int64_t c = 0;
  for (; c + 16 <= j.k; c += 16) _mm512_storeu_ps(out + c, _mm512_mul_ps(LoadI8(p + c), s));
  if (c < j.k) {
    const __mmask16 mask = TailMask(j.k - c);
    _mm512_mask_storeu_ps(out + c, mask, _mm512_mul_ps(LoadI8Part(p + c, mask), s));
  }
}

// y[m, c] = sum over r of (x[m, r] * s[r]) * q[r, c]: each y lane one f32 chain over r in order.
constexpr int kCt = 8;  // 16-wide column chunks per tile

void ColumnTileT(const Job& j, int64_t m, int64_t c0, int64_t cols, float* y) {
  __m512 acc[kCt];
  for (int t = 0; t < kCt; ++t) acc[t] = _mm512_setzero_ps();
  const float* xm = j.x + m * j.n;
  const int64_t full = cols / 16;
  const __mmask16 tail = TailMask(cols - full * 16);
  const int chunks = static_cast<int>(full + (tail != 0 ? 1 : 0));
  for (int64_t r = 0; r < j.n; ++r) {
    const int8_t* row = j.q + r * j.k + c0;
    const __m512 xr = _mm512_set1_ps(xm[r] * Scale(j, r));
    for (int t = 0; t < kCt; ++t) {
      if (t >= chunks) break;
      const __m512 w = t < full ? LoadI8(row + t * 16) : LoadI8Part(row + t * 16, tail);
      acc[t] = _mm512_fmadd_ps(xr, w, acc[t]);
    }
  }
  StoreChunks(y + m * j.k + c0, acc, chunks, full, tail);
}

void TransposedLinearI8(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (w.dtype != DType::kI8) return g_next_transposed_linear(x, m, w, y);
  if (!PerRowF32(w)) return RefKernels().transposed_linear(x, m, w, y);
  if (m <= 0 || w.k <= 0) return;
  const Job j = MakeJob(x, m, w, y);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c0 = 0; c0 < j.k; c0 += kCt * 16)
      ColumnTileT(j, i, c0, std::min<int64_t>(kCt * 16, j.k - c0), y);
  }
}

}  // namespace

void FillInt8Kernels(KernelTable& t) {
  g_next_linear = t.linear;
  g_next_dequant_row = t.dequant_row;
  g_next_transposed_linear = t.transposed_linear;
  t.linear = LinearI8;
  t.dequant_row = DequantRowI8;
  t.transposed_linear = TransposedLinearI8;
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_END
