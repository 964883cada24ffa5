// AVX2 linear and transposed linear over f32 / bf16 / f16 / fp8-e4m3 weights and int8 weights
// with per-row scales (`--quantize int8`); W8A8 (`--quantize w8a8`) goes to its own exact integer
// kernel (linear_w8a8_avx2.cc). dequant_row stays the reference's.
//
// Summation order (the contract that keeps batched = alone): every output y[m, n] is one f32x8
// accumulator, zeroed, then fma(x[m, chunk], w[n, chunk], acc) over the 8-wide chunks of k in
// order (for fp8, per scale block: its full chunks then its zero-padded tail chunk, the weights
// times the block scale; otherwise one block of k), then ReduceAdd (times the row scale for
// int8). That sequence is the same whatever M is, however M and N are tiled and whichever thread
// runs the tile, so a token's output never depends on its batch.
//
// Decode (M <= 4): each tile of weight rows (8 at M = 1) is streamed once from memory and
// converted in registers, all M activation rows share it, and each row is prefetched ahead.
// Batches (M > 4): blocks of BlockRows(k) activation rows (they stay in L2); per block, tiles of
// 2 weight rows go through k in 512-column segments, each converted once into f32 on the stack
// and used by every 6-row M-tile of the block (6 x 2 register tiles: 12 of the 16 ymm hold
// accumulators), the partial sums carried between segments (which does not change the
// arithmetic). Threads split N into chunks of whole tiles, as the AVX-512 kernels do.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/avx2/avx2_kernels.h"
#include "kernels/bf16_activations.h"
#include "kernels/kernel_table.h"
#include "kernels/ref/linear_w8a8_ref.h"
#include "threads/thread_pool.h"
// Last: defines the AVX2 helpers under the target pragma.
#include "kernels/avx2/avx2_common.h"

LATENT_AVX2_BEGIN
namespace latent::kernels::avx2 {
namespace {

constexpr int kMt = 4;                // decode: at most this many activation rows
constexpr int kMtBig = 6;             // batches: activation rows per register tile
constexpr int kNtBig = 2;             // batches: weight rows per register tile
constexpr int64_t kMb = 48;           // batches: activation rows per block (at most; 8 M-tiles)
constexpr int64_t kSegment = 512;     // batches: columns per k-segment, a multiple of 8
constexpr int64_t kPrefetch = 1024;   // decode: software prefetch distance in bytes

struct Job {
  const float* x;
  int64_t m;
  const uint8_t* w;
  int64_t n, k;
  int64_t row_bytes;
  float* y;
  // fp8 block scales; `block` is the k-extent of one scale (k when unscaled).
  const void* scale;
  DType scale_dtype;
  int64_t block_n, block;
  int64_t scale_cols;
  int64_t scale_row0;
  const uint8_t* row_scale;  // int8: f32 [n] of this view's rows (possibly unaligned), else null
};

// The multiplier of row `row` for scale block `kb`: the block scale times 2^8 for LoadF8.
inline float BlockScale(const Job& j, int64_t row, int64_t kb) {
  if (j.scale == nullptr) return kF8Unscale;
  return LoadAsF32(j.scale, j.scale_dtype, ((j.scale_row0 + row) / j.block_n) * j.scale_cols + kb) *
         kF8Unscale;
}

// The output of row `row` from its accumulator.
inline float Finish(const Job& j, int64_t row, __m256 acc) {
  const float sum = ReduceAdd(acc);
  if (j.row_scale == nullptr) return sum;
  float s;
  std::memcpy(&s, j.row_scale + 4 * row, 4);
  return sum * s;
}

// Decode tile: MT activation rows x NT weight rows over all of k, accumulators in registers.
template <class L, int MT, int NT>
void TileDirect(const Job& j, int64_t n0) {
  const uint8_t* rows[NT];
  for (int b = 0; b < NT; ++b) rows[b] = j.w + (n0 + b) * j.row_bytes;
  __m256 acc[MT][NT];
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) acc[a][b] = _mm256_setzero_ps();
  for (int64_t k0 = 0, kb = 0; k0 < j.k; k0 += j.block, ++kb) {
    const int64_t k1 = std::min(j.k, k0 + j.block);
    __m256 s[NT];
    if constexpr (L::kFp8) {
      for (int b = 0; b < NT; ++b) s[b] = _mm256_set1_ps(BlockScale(j, n0 + b, kb));
    }
    int64_t c = k0;
    for (; c + 8 <= k1; c += 8) {
      if (((c * L::kBytes) & 63) < 8 * L::kBytes) {  // one prefetch per new cache line
        for (int b = 0; b < NT; ++b) {
          _mm_prefetch(reinterpret_cast<const char*>(rows[b] + c * L::kBytes + kPrefetch),
                       _MM_HINT_T0);
        }
      }
      __m256 xv[MT];
      for (int a = 0; a < MT; ++a) xv[a] = InRegister(_mm256_loadu_ps(j.x + (a * j.k) + c));
      for (int b = 0; b < NT; ++b) {
        __m256 w = L::Full(rows[b] + c * L::kBytes);
        if constexpr (L::kFp8) w = _mm256_mul_ps(w, s[b]);
        for (int a = 0; a < MT; ++a) acc[a][b] = _mm256_fmadd_ps(xv[a], w, acc[a][b]);
      }
    }
    if (c < k1) {
      __m256 xv[MT];
      for (int a = 0; a < MT; ++a) xv[a] = LoadPart(j.x + a * j.k + c, k1 - c);
      for (int b = 0; b < NT; ++b) {
        __m256 w = L::Part(rows[b] + c * L::kBytes, k1 - c);
        if constexpr (L::kFp8) w = _mm256_mul_ps(w, s[b]);
        for (int a = 0; a < MT; ++a) acc[a][b] = _mm256_fmadd_ps(xv[a], w, acc[a][b]);
      }
    }
  }
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) j.y[a * j.n + n0 + b] = Finish(j, n0 + b, acc[a][b]);
}

// Decode: weight rows [r0, r1) against the m <= kMt activation rows, one pass per tile.
template <class L, int MT>
void RowsDecode(const Job& j, int64_t r0, int64_t r1) {
  constexpr int kTile = MT == 1 ? 8 : MT == 2 ? 4 : 2;
  int64_t n = r0;
  for (; n + kTile <= r1; n += kTile) TileDirect<L, MT, kTile>(j, n);
  for (; n + 2 <= r1; n += 2) TileDirect<L, MT, 2>(j, n);
  if (n < r1) TileDirect<L, MT, 1>(j, n);
}

// Batches: MT activation rows (from m0) x NT weight rows over the segment [c0, c1) (inside one
// scale block), read from `seg[b]` (column c0 of row b, f32: the staged copy or the weights
// themselves); `io` carries the accumulators ([MT][kNtBig]) between segments.
template <int MT, int NT>
void TileSegment(const Job& j, int64_t m0, int64_t c0, int64_t c1, const float* const* seg,
                 __m256* io, bool first) {
  const float* xs[MT];
  for (int a = 0; a < MT; ++a) xs[a] = j.x + (m0 + a) * j.k;
  __m256 acc[MT][NT];
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) acc[a][b] = first ? _mm256_setzero_ps() : io[a * kNtBig + b];
  int64_t c = c0;
  for (; c + 8 <= c1; c += 8) {
    __m256 w[NT];
    for (int b = 0; b < NT; ++b) w[b] = _mm256_loadu_ps(seg[b] + (c - c0));
    for (int a = 0; a < MT; ++a) {
      const __m256 xv = InRegister(_mm256_loadu_ps(xs[a] + c));
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm256_fmadd_ps(xv, w[b], acc[a][b]);
    }
  }
  if (c < c1) {  // the block's last chunk: the staged weights hold zeros past c1
    __m256 w[NT];
    for (int b = 0; b < NT; ++b) w[b] = _mm256_loadu_ps(seg[b] + (c - c0));
    for (int a = 0; a < MT; ++a) {
      const __m256 xv = LoadPart(xs[a] + c, c1 - c);
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm256_fmadd_ps(xv, w[b], acc[a][b]);
    }
  }
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) io[a * kNtBig + b] = acc[a][b];
}

// Weight rows [n0, n0 + NT) against activation rows [m0, m1) (at most kMb).
template <class L, int NT>
void TileBatch(const Job& j, int64_t n0, int64_t m0, int64_t m1) {
  alignas(32) __m256 io[kMb * kNtBig];
  alignas(32) float stage[NT][kSegment + 8];
  bool first = true;
  for (int64_t k0 = 0, kb = 0; k0 < j.k; k0 += j.block, ++kb) {
    const int64_t k1 = std::min(j.k, k0 + j.block);
    for (int64_t c0 = k0; c0 < k1; c0 += kSegment) {
      const int64_t c1 = std::min(k1, c0 + kSegment);
      const float* seg[NT];
      for (int b = 0; b < NT; ++b) {
        const uint8_t* row = j.w + (n0 + b) * j.row_bytes;
        // The segment converted (and for fp8 scaled) once: exactly the vectors the decode tile
        // computes, zero-padded to whole chunks.
        __m256 s = _mm256_setzero_ps();
        if constexpr (L::kFp8) s = _mm256_set1_ps(BlockScale(j, n0 + b, kb));
        for (int64_t c = c0; c < c1; c += 8) {
          if (((c * L::kBytes) & 63) < 8 * L::kBytes) {
            _mm_prefetch(reinterpret_cast<const char*>(row + c * L::kBytes + kSegment * L::kBytes),
                         _MM_HINT_T0);
          }
          __m256 w = c + 8 <= c1 ? L::Full(row + c * L::kBytes)
                                 : L::Part(row + c * L::kBytes, c1 - c);
          if constexpr (L::kFp8) w = _mm256_mul_ps(w, s);
          _mm256_store_ps(&stage[b][c - c0], w);
        }
        seg[b] = stage[b];
      }
      for (int64_t m = m0; m < m1; m += kMtBig) {
        WithRowCount<kMtBig>(m1 - m, [&]<int MT>() {
          TileSegment<MT, NT>(j, m, c0, c1, seg, &io[(m - m0) * kNtBig], first);
        });
      }
      first = false;
    }
  }
  for (int64_t m = m0; m < m1; ++m)
    for (int b = 0; b < NT; ++b)
      j.y[m * j.n + n0 + b] = Finish(j, n0 + b, io[(m - m0) * kNtBig + b]);
}

// Activation rows per block: the block (rows x k f32) stays in L2 (256 KiB) while every weight
// tile of a chunk goes past it; 2 * kMtBig to kMb rows, a multiple of kMtBig.
inline int64_t BlockRows(int64_t k) {
  const int64_t rows = ((int64_t{256} << 10) / std::max<int64_t>(4 * k, 1)) / kMtBig * kMtBig;
  return std::clamp<int64_t>(rows, 2 * kMtBig, kMb);
}

template <class L>
void Rows(const Job& j, int64_t r0, int64_t r1) {
  if (j.m <= kMt) {
    WithRowCount<kMt>(j.m, [&]<int MT>() { RowsDecode<L, MT>(j, r0, r1); });
    return;
  }
  // Equal blocks (64 rows: 24 + 24 + 16, not 30 + 30 + 4), whole M-tiles each.
  const int64_t blocks = (j.m + BlockRows(j.k) - 1) / BlockRows(j.k);
  const int64_t mb = std::min(kMb, ((j.m + blocks - 1) / blocks + kMtBig - 1) / kMtBig * kMtBig);
  for (int64_t m0 = 0; m0 < j.m; m0 += mb) {
    const int64_t m1 = std::min(j.m, m0 + mb);
    int64_t n = r0;
    for (; n + kNtBig <= r1; n += kNtBig) TileBatch<L, kNtBig>(j, n, m0, m1);
    if (n < r1) TileBatch<L, 1>(j, n, m0, m1);
  }
}

template <class L>
void LinearTyped(const Job& j) {
  // Chunks of whole tiles with about 128 KiB of weights each (256 KiB for batches: every
  // activation block streams past a chunk's weights), at least 4 per thread.
  const int64_t tile = j.m <= kMt ? 8 : kNtBig;
  const int64_t threads = threads::NumThreads();
  const int64_t chunk_bytes = j.m <= kMt ? int64_t{128} << 10 : int64_t{256} << 10;
  int64_t grain = std::max<int64_t>(tile, chunk_bytes / std::max<int64_t>(j.row_bytes, 1));
  grain = std::min(grain, (j.n + 4 * threads - 1) / (4 * threads));
  grain = std::max<int64_t>(tile, (grain + tile - 1) / tile * tile);
  const auto rows = [&j](int64_t r0, int64_t r1) { Rows<L>(j, r0, r1); };
  const double work =
      static_cast<double>(j.n) * static_cast<double>(j.k) * static_cast<double>(j.m);
  if (threads == 1 || work < 32768.0 || grain >= j.n) {
    rows(0, j.n);
  } else {
    threads::ParallelFor(j.n, grain, rows);
  }
}

// int8 with one f32 scale per row: the layout `--quantize int8` writes; anything else goes to
// the reference.
bool PerRowF32(const WeightRef& w) {
  return w.scale != nullptr && w.scale_dtype == DType::kF32 && w.block_n == 1 && w.block_k == w.k;
}

Job MakeJob(const float* x, int64_t m, const WeightRef& w, float* y) {
  Job j;
  j.x = x;
  j.m = m;
  j.w = static_cast<const uint8_t*>(w.data);
  j.n = w.n;
  j.k = w.k;
  j.row_bytes = w.k * DTypeSize(w.dtype);
  j.y = y;
  j.scale = w.dtype == DType::kF8E4M3 ? w.scale : nullptr;
  j.scale_dtype = w.scale_dtype;
  j.block_n = w.block_n > 0 ? w.block_n : 1;
  j.block = (j.scale != nullptr && w.block_k > 0) ? w.block_k : std::max<int64_t>(w.k, 1);
  j.scale_cols = (w.k + j.block - 1) / j.block;
  j.scale_row0 = w.scale_row0;
  j.row_scale = w.dtype == DType::kI8 && w.scale != nullptr
                    ? static_cast<const uint8_t*>(w.scale) + 4 * w.scale_row0
                    : nullptr;
  return j;
}

void Linear(const float* x_in, int64_t m, const WeightRef& w_in, float* y, float* scratch) {
  if (m <= 0 || w_in.n <= 0) return;
  // bf16 compute: the inputs rounded once per call, then the same kernels.
  thread_local std::vector<float> rounded;
  const float* x = Bf16Input(x_in, m * w_in.k, w_in, rounded, RoundActivationsToBf16);
  const WeightRef w = WithoutBf16Flag(w_in);
  if (w.row_sums != nullptr) {
    if (IsW8A8(w)) return LinearW8A8(x, m, w, y);
    return RefKernels().linear(x, m, w, y, scratch);
  }
  const Job j = MakeJob(x, m, w, y);
  switch (w.dtype) {
    case DType::kF32:
      return LinearTyped<LoadF32>(j);
    case DType::kBF16:
      return LinearTyped<LoadBF16>(j);
    case DType::kF16:
      return LinearTyped<LoadF16>(j);
    case DType::kF8E4M3:
      return LinearTyped<LoadF8>(j);
    case DType::kI8:
      if (PerRowF32(w)) return LinearTyped<LoadI8>(j);
      [[fallthrough]];
    default:
      return RefKernels().linear(x, m, w, y, scratch);
  }
}

// ---- transposed linear: y[m, c] = sum over r of x[m, r] * W[r, c] ----
// Each y lane is one f32 chain over r in order: acc = fma(x[m, r] (times s[r] for int8),
// w[r, c] (times the block scale for fp8), acc).

constexpr int kCt = 8;  // 8-wide column chunks per tile

template <class L>
void ColumnTileT(const Job& j, int64_t m, int64_t c0, int64_t cols, float* y) {
  // cols <= kCt * 8; the last chunk may be partial.
  __m256 acc[kCt];
  float s[kCt] = {};
  for (int t = 0; t < kCt; ++t) acc[t] = _mm256_setzero_ps();
  const float* xm = j.x + m * j.n;
  const int64_t full = cols / 8, rest = cols - full * 8;
  const int chunks = static_cast<int>(full + (rest != 0 ? 1 : 0));
  int64_t scale_row = -1;
  for (int64_t r = 0; r < j.n; ++r) {
    const uint8_t* row = j.w + r * j.row_bytes + c0 * L::kBytes;
    if constexpr (L::kFp8) {
      if ((j.scale_row0 + r) / j.block_n != scale_row) {  // a new row block: its scales here
        scale_row = (j.scale_row0 + r) / j.block_n;
        for (int t = 0; t < chunks; ++t) s[t] = BlockScale(j, r, (c0 + t * 8) / j.block);
      }
    }
    float xr = xm[r];
    if (j.row_scale != nullptr) {
      float sr;
      std::memcpy(&sr, j.row_scale + 4 * r, 4);
      xr *= sr;
    }
    const __m256 xv = _mm256_set1_ps(xr);
    for (int t = 0; t < kCt; ++t) {
      if (t >= chunks) break;
      __m256 w = t < full ? L::Full(row + t * 8 * L::kBytes)
                          : L::Part(row + t * 8 * L::kBytes, rest);
      if constexpr (L::kFp8) w = _mm256_mul_ps(w, _mm256_set1_ps(s[t]));
      acc[t] = _mm256_fmadd_ps(xv, w, acc[t]);
    }
  }
  float* out = y + m * j.k + c0;
  for (int t = 0; t < chunks; ++t) {
    if (t < full) {
      _mm256_storeu_ps(out + t * 8, acc[t]);
    } else {
      StorePart(out + t * 8, rest, acc[t]);
    }
  }
}

template <class L>
void LinearTTyped(const Job& j, float* y) {
  for (int64_t m = 0; m < j.m; ++m) {
    for (int64_t c0 = 0; c0 < j.k; c0 += kCt * 8)
      ColumnTileT<L>(j, m, c0, std::min<int64_t>(kCt * 8, j.k - c0), y);
  }
}

// x [m, w.n], y [m, w.k].
void TransposedLinear(const float* x_in, int64_t m, const WeightRef& w_in, float* y) {
  if (m <= 0 || w_in.k <= 0) return;
  thread_local std::vector<float> rounded;  // bf16 compute: the inputs rounded once per call
  const float* x = Bf16Input(x_in, m * w_in.n, w_in, rounded, RoundActivationsToBf16);
  const WeightRef w = WithoutBf16Flag(w_in);
  const Job j = MakeJob(x, m, w, y);
  // An 8-wide chunk must not straddle two fp8 scale blocks; otherwise use the reference. The
  // choice depends on the weight only, so results stay independent of m.
  const bool fp8_ok = j.scale == nullptr || j.block % 8 == 0;
  switch (w.dtype) {
    case DType::kF32:
      return LinearTTyped<LoadF32>(j, y);
    case DType::kBF16:
      return LinearTTyped<LoadBF16>(j, y);
    case DType::kF16:
      return LinearTTyped<LoadF16>(j, y);
    case DType::kF8E4M3:
      if (fp8_ok) return LinearTTyped<LoadF8>(j, y);
      break;
    case DType::kI8:
      if (PerRowF32(w)) return LinearTTyped<LoadI8>(j, y);
      break;
    default:
      break;
  }
  RefKernels().transposed_linear(x, m, w, y);
}

}  // namespace

void RoundActivationsToBf16(const float* x, int64_t count, float* out) {
  // F32ToBF16 on 8 lanes: add 0x7fff plus the kept part's lowest bit, clear the low half; NaN
  // (|bits| > inf) keeps its high half with the quiet bit set.
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256i b = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), one);
    const __m256i rounded =
        _mm256_and_si256(_mm256_add_epi32(b, _mm256_add_epi32(bias, lsb)), high);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs_mask), inf);
    const __m256i quieted = _mm256_and_si256(_mm256_or_si256(b, quiet), high);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, quieted, nan)));
  }
  RoundToBf16Scalar(x + i, count - i, out + i);
}

void FillLinearKernels(KernelTable& t) {
  t.linear = Linear;
  t.transposed_linear = TransposedLinear;
}

}  // namespace latent::kernels::avx2
LATENT_AVX2_END
