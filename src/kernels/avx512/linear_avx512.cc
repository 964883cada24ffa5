// AVX-512 linear, transposed linear and dequant_row over f32 / bf16 / f16 / fp8-e4m3 weights.
//
// Summation order (the contract that keeps batched = alone): every output y[m, n] is one f32x16
// accumulator, zeroed, then fma(x[m, chunk], w[n, chunk], acc) over the 16-wide chunks of k in
// order (for fp8, per scale block: its full chunks then its masked tail chunk; otherwise one
// block of k), then ReduceAdd. That sequence is the same whatever M is, however M and N are
// tiled and whichever thread runs the tile, so a token's output never depends on its batch.
//
// Decode (M <= 4): each tile of 4 weight rows is streamed once from memory and converted in
// registers; all M activation rows share it; each tile also prefetches the next one (a 2048-wide
// bf16 row is one 4 KiB page, where hardware prefetchers stop). Batches (M > 4): super-blocks of
// at most ~8 MiB of activation rows (one parallel pass over the weights each, so the rows stay in
// L3), inside them blocks of BlockRows(k) rows (<= 256 KiB, L2; copied to a padded stride when
// theirs is a multiple of 4 KiB, which would alias in L1); per block, tiles of 4 weight rows go
// through k in 512-column segments, each converted once per 6-row M-tile (6 x 4 register tile)
// while the segment two ahead is prefetched; partial sums go to the stack between segments
// (which does not change the arithmetic). Threads split N into chunks of whole tiles.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/bf16_activations.h"
#include "kernels/kernel_table.h"
#include "threads/thread_pool.h"
// Last: opens nothing, but defines the AVX-512 helpers under the target pragma.
#include "kernels/avx512/avx512_common.h"

LATENT_AVX512_BEGIN
namespace latent::kernels::avx512 {
namespace {

constexpr int kNt = 4;       // decode: weight rows per tile
constexpr int kMt = 4;       // decode: at most this many activation rows
constexpr int64_t kMb = 36;  // batches: activation rows per block (at most; a multiple of 6)

struct Job {
  const float* x;
  int64_t ldx;  // floats between activation rows
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
};

// The multiplier of row `row` for scale block `kb`: the block scale times 2^8 for LoadF8.
inline float RowScale(const Job& j, int64_t row, int64_t kb) {
  if (j.scale == nullptr) return kF8Unscale;
  return LoadAsF32(j.scale, j.scale_dtype,
                    ((j.scale_row0 + row) / j.block_n) * j.scale_cols + kb) *
         kF8Unscale;
}

// Direct tile: MT activation rows x NT weight rows over all of k, accumulators in registers.
// Prefetch: `lead` prefetches each row kPrefetch bytes ahead; `next` also prefetches the cache
// line at the same offset in the next tile (the row NT rows on), so every line of the next tile
// is requested a whole tile ahead.
template <class L, int MT, int NT>
void TileDirect(const Job& j, int64_t m0, int64_t n0, bool lead = true, bool next = false) {
  const uint8_t* rows[NT];
  for (int b = 0; b < NT; ++b) rows[b] = j.w + (n0 + b) * j.row_bytes;
  const int64_t ahead = NT * j.row_bytes;
  const float* xs[MT];
  for (int a = 0; a < MT; ++a) xs[a] = j.x + (m0 + a) * j.ldx;
  __m512 acc[MT][NT];
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_setzero_ps();
  for (int64_t k0 = 0, kb = 0; k0 < j.k; k0 += j.block, ++kb) {
    const int64_t k1 = std::min(j.k, k0 + j.block);
    __m512 s[NT];
    if constexpr (L::kFp8) {
      for (int b = 0; b < NT; ++b) s[b] = _mm512_set1_ps(RowScale(j, n0 + b, kb));
    }
    int64_t c = k0;
    for (; c + 16 <= k1; c += 16) {
      if (((c * L::kBytes) & 63) < 16 * L::kBytes) {  // one prefetch per new cache line
        if (lead) {
          for (int b = 0; b < NT; ++b) {
            _mm_prefetch(reinterpret_cast<const char*>(rows[b] + c * L::kBytes + L::kPrefetch),
                         _MM_HINT_T0);
          }
        }
        if (next) {
          for (int b = 0; b < NT; ++b) {
            _mm_prefetch(reinterpret_cast<const char*>(rows[b] + c * L::kBytes + ahead),
                         _MM_HINT_T0);
          }
        }
      }
      __m512 w[NT];
      for (int b = 0; b < NT; ++b) {
        w[b] = L::Full(rows[b] + c * L::kBytes);
        if constexpr (L::kFp8) w[b] = _mm512_mul_ps(w[b], s[b]);
      }
      for (int a = 0; a < MT; ++a) {
        const __m512 xv = InRegister(_mm512_loadu_ps(xs[a] + c));
        for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_fmadd_ps(xv, w[b], acc[a][b]);
      }
    }
    if (c < k1) {
      const __mmask16 mask = TailMask(k1 - c);
      __m512 w[NT];
      for (int b = 0; b < NT; ++b) {
        w[b] = L::Part(rows[b] + c * L::kBytes, mask);
        if constexpr (L::kFp8) w[b] = _mm512_mul_ps(w[b], s[b]);
      }
      for (int a = 0; a < MT; ++a) {
        const __m512 xv = _mm512_maskz_loadu_ps(mask, xs[a] + c);
        for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_fmadd_ps(xv, w[b], acc[a][b]);
      }
    }
  }
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) j.y[(m0 + a) * j.n + n0 + b] = ReduceAdd(acc[a][b]);
}

// Decode: weight rows [r0, r1) against the m <= kMt activation rows, one pass per tile.
template <class L, int MT>
void RowsDecode(const Job& j, int64_t r0, int64_t r1) {
  constexpr int kTile = MT == 1 ? L::kDecodeRows : kNt;
  int64_t n = r0;
  // Every tile prefetches its own rows kPrefetch bytes ahead and the next tile's rows at the
  // same offsets (a tile is one 4 KiB page per row for 2048-wide bf16: the hardware prefetchers
  // stop at page boundaries, so without the second prefetch each tile starts with misses).
  for (; n + kTile <= r1; n += kTile) {
    TileDirect<L, MT, kTile>(j, 0, n, /*lead=*/true, /*next=*/n + 2 * kTile <= r1);
  }
  for (; n + 2 <= r1; n += 2) TileDirect<L, MT, 2>(j, 0, n);
  if (n < r1) TileDirect<L, MT, 1>(j, 0, n);
}

// Batches (m > kMt): register tiles of up to kMtBig activation rows x kNtBig weight rows over one
// k-segment [c0, c1) (inside one scale block; only the block's last chunk may be partial), with
// the partial sums carried in `io` between segments. Pass 0 over a segment also prefetches the
// weights the next segment will read (`pf`: that segment's start in each row).
constexpr int kMtBig = 6;  // 6 x 4 accumulators + 4 weight vectors + 1 activation: 29 of 32 zmm
constexpr int kNtBig = 4;
constexpr int64_t kSegment = 512;  // columns per k-segment, a multiple of 16
constexpr int64_t kPfSegments = 2;  // batches: prefetch distance in segments

// seg[b]: column c0 of weight row n0 + b (or of its staged f32 copy).
template <class L, int MT, int NT>
void TileSegment(const Job& j, int64_t m0, int64_t n0, int64_t c0, int64_t c1, int64_t kb,
                 const uint8_t* const* seg, __m512* io, bool first, const uint8_t* const* pf) {
  const float* xs[MT];
  for (int a = 0; a < MT; ++a) xs[a] = j.x + (m0 + a) * j.ldx;
  __m512 acc[MT][NT];
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) acc[a][b] = first ? _mm512_setzero_ps() : io[a * kNtBig + b];
  __m512 s[NT];
  if constexpr (L::kFp8) {
    for (int b = 0; b < NT; ++b) s[b] = _mm512_set1_ps(RowScale(j, n0 + b, kb));
  }
  int64_t c = c0;
  for (; c + 16 <= c1; c += 16) {
    if (pf != nullptr && ((c * L::kBytes) & 63) < 16 * L::kBytes) {  // a new cache line
      for (int b = 0; b < NT; ++b) {
        _mm_prefetch(reinterpret_cast<const char*>(pf[b] + (c - c0) * L::kBytes), _MM_HINT_T0);
      }
    }
    __m512 w[NT];
    for (int b = 0; b < NT; ++b) {
      w[b] = L::Full(seg[b] + (c - c0) * L::kBytes);
      if constexpr (L::kFp8) w[b] = _mm512_mul_ps(w[b], s[b]);
    }
    for (int a = 0; a < MT; ++a) {
      const __m512 xv = InRegister(_mm512_loadu_ps(xs[a] + c));
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_fmadd_ps(xv, w[b], acc[a][b]);
    }
  }
  if (c < c1) {
    const __mmask16 mask = TailMask(c1 - c);
    __m512 w[NT];
    for (int b = 0; b < NT; ++b) {
      w[b] = L::Part(seg[b] + (c - c0) * L::kBytes, mask);
      if constexpr (L::kFp8) w[b] = _mm512_mul_ps(w[b], s[b]);
    }
    for (int a = 0; a < MT; ++a) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, xs[a] + c);
      for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_fmadd_ps(xv, w[b], acc[a][b]);
    }
  }
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) io[a * kNtBig + b] = acc[a][b];
}

template <class L, int NT>
void TileSegmentAnyM(const Job& j, int64_t m0, int64_t mt, int64_t n0, int64_t c0, int64_t c1,
                     int64_t kb, const uint8_t* const* seg, __m512* io, bool first,
                     const uint8_t* const* pf) {
  WithRowCount<kMtBig>(mt, [&]<int MT>() {
    TileSegment<L, MT, NT>(j, m0, n0, c0, c1, kb, seg, io, first, pf);
  });
}

// Batches: the segment [c0, c1) of the NT rows converted (and for fp8 scaled) once into f32:
// exactly the vectors TileSegment<L> would compute, so the sums are the same; prefetches `pf`.
template <class L, int NT>
void StageRows(const Job& j, int64_t n0, int64_t c0, int64_t c1, const uint8_t* const* pf,
               float* stage) {
  for (int b = 0; b < NT; ++b) {
    const uint8_t* row = j.w + (n0 + b) * j.row_bytes;
    int64_t kb = c0 / j.block, block_end = (kb + 1) * j.block;
    __m512 s = _mm512_setzero_ps();
    if constexpr (L::kFp8) s = _mm512_set1_ps(RowScale(j, n0 + b, kb));
    for (int64_t c = c0; c < c1; c += 16) {
      if constexpr (L::kFp8) {
        if (c >= block_end) {  // chunks never straddle two scale blocks
          ++kb;
          block_end += j.block;
          s = _mm512_set1_ps(RowScale(j, n0 + b, kb));
        }
      }
      if (pf != nullptr && ((c * L::kBytes) & 63) < 16 * L::kBytes) {
        _mm_prefetch(reinterpret_cast<const char*>(pf[b] + (c - c0) * L::kBytes), _MM_HINT_T0);
      }
      __m512 w = c + 16 <= c1 ? L::Full(row + c * L::kBytes)
                              : L::Part(row + c * L::kBytes, TailMask(c1 - c));
      if constexpr (L::kFp8) w = _mm512_mul_ps(w, s);
      _mm512_store_ps(stage + b * kSegment + (c - c0), w);
    }
  }
}

// Weight rows [n0, n0 + NT) (next tile at `next`, or null) against activation rows [m0, m1).
template <class L, int NT>
void TileBatch(const Job& j, int64_t n0, int64_t m0, int64_t m1, const uint8_t* next) {
  alignas(64) __m512 io[kMb * kNtBig];
  alignas(64) float stage[L::kFp8 ? NT * kSegment : 1];
  // fp8 converts slowly: with more than one M-tile, convert each segment once (for bf16 and f16
  // converting in registers per M-tile measured faster). When no chunk ends inside a scale
  // block (block % 16 == 0), staged segments may span several blocks.
  const bool staged = L::kFp8 && m1 - m0 > kMtBig;
  const int64_t span = staged && j.block % 16 == 0 ? j.k : j.block;
  bool first = true;
  const uint8_t* pf[NT];
  const uint8_t* seg[NT];
  for (int64_t k0 = 0; k0 < j.k; k0 += span) {
    const int64_t k1 = std::min(j.k, k0 + span);
    for (int64_t c0 = k0; c0 < k1; c0 += kSegment) {
      const int64_t c1 = std::min(k1, c0 + kSegment);
      const bool last = c1 >= j.k;
      bool prefetch = !last || next != nullptr;
      if (span == j.k) {
        // Segment i prefetches segment i + kPfSegments of the same rows, or of the next tile.
        const int64_t t = c0 / kSegment + kPfSegments, segs = (j.k + kSegment - 1) / kSegment;
        prefetch = t < segs || (next != nullptr && t - segs < segs);
        for (int b = 0; b < NT; ++b) {
          pf[b] = t < segs ? j.w + (n0 + b) * j.row_bytes + t * kSegment * L::kBytes
                           : next + b * j.row_bytes + (t - segs) * kSegment * L::kBytes;
          seg[b] = j.w + (n0 + b) * j.row_bytes + c0 * L::kBytes;
        }
      } else {
        for (int b = 0; b < NT; ++b) {
          pf[b] = last ? (next != nullptr ? next + b * j.row_bytes : nullptr)
                       : j.w + (n0 + b) * j.row_bytes + c1 * L::kBytes;
          seg[b] = j.w + (n0 + b) * j.row_bytes + c0 * L::kBytes;
        }
      }
      if (staged) {
        if constexpr (L::kFp8) StageRows<L, NT>(j, n0, c0, c1, prefetch ? pf : nullptr, stage);
        for (int b = 0; b < NT; ++b)
          seg[b] = reinterpret_cast<const uint8_t*>(stage + b * kSegment);
        for (int64_t m = m0; m < m1; m += kMtBig) {
          TileSegmentAnyM<LoadF32, NT>(j, m, std::min<int64_t>(kMtBig, m1 - m), n0, c0, c1, 0, seg,
                                       &io[(m - m0) * kNtBig], first, nullptr);
        }
      } else {
        for (int64_t m = m0; m < m1; m += kMtBig) {
          TileSegmentAnyM<L, NT>(j, m, std::min<int64_t>(kMtBig, m1 - m), n0, c0, c1, c0 / j.block,
                                 seg, &io[(m - m0) * kNtBig], first,
                                 m == m0 && prefetch ? pf : nullptr);
        }
      }
      first = false;
    }
  }
  for (int64_t m = m0; m < m1; ++m)
    for (int b = 0; b < NT; ++b) j.y[m * j.n + n0 + b] = ReduceAdd(io[(m - m0) * kNtBig + b]);
}

// Activation rows per block: the block (rows x k f32) stays in L2 (256 KiB) while every weight
// tile of a chunk goes past it; 2 * kMtBig to kMb rows, a multiple of kMtBig.
inline int64_t BlockRows(int64_t k) {
  const int64_t rows = ((int64_t{256} << 10) / std::max<int64_t>(4 * k, 1)) / kMtBig * kMtBig;
  return std::clamp<int64_t>(rows, 2 * kMtBig, kMb);
}

// Weight rows [r0, r1) against all activation rows. m <= kMt: each weight tile streams from
// memory once, converted in registers, all rows at once. Larger m: blocks of BlockRows(k)
// activation rows; per block, tiles of kNtBig weight rows go through k in segments, each segment
// converted once into f32 (for more than kMtBig rows) and used by every M-tile of the block
// while the next one is prefetched.
template <class L>
void Rows(const Job& j, int64_t r0, int64_t r1) {
  if (j.m <= kMt) {
    WithRowCount<kMt>(j.m, [&]<int MT>() { RowsDecode<L, MT>(j, r0, r1); });
    return;
  }
  // Equal blocks (64 rows: 24 + 24 + 16, not 30 + 30 + 4), each at most BlockRows(k) rounded
  // up to whole M-tiles.
  const int64_t blocks = (j.m + BlockRows(j.k) - 1) / BlockRows(j.k);
  const int64_t mb =
      std::min(kMb, ((j.m + blocks - 1) / blocks + kMtBig - 1) / kMtBig * kMtBig);
  for (int64_t m0 = 0; m0 < j.m; m0 += mb) {
    const int64_t m1 = std::min(j.m, m0 + mb);
    for (int64_t n = r0; n < r1; n += kNtBig) {
      const int64_t rows = std::min<int64_t>(kNtBig, r1 - n);
      const uint8_t* next = n + kNtBig < r1 ? j.w + (n + kNtBig) * j.row_bytes : nullptr;
      static_assert(kNtBig <= 4);
      switch (rows) {
        case 4:
          TileBatch<L, 4>(j, n, m0, m1, next);
          break;
        case 3:
          TileBatch<L, 3>(j, n, m0, m1, next);
          break;
        case 2:
          TileBatch<L, 2>(j, n, m0, m1, next);
          break;
        default:
          TileBatch<L, 1>(j, n, m0, m1, next);
          break;
      }
    }
  }
}

template <class L>
void LinearTyped(const Job& job) {
  // Batches read up to kMtBig activation rows at once; rows whose stride is a multiple of 4 KiB
  // would all fall into the same L1 sets (with the weight rows), so copy them to a padded stride.
  Job j = job;
  thread_local std::vector<float> padded;
  if (j.m > kMt && (j.k * 4) % 4096 < 256) {
    const int64_t stride = j.k + 16;
    if (static_cast<int64_t>(padded.size()) < j.m * stride) padded.resize(j.m * stride);
    for (int64_t m = 0; m < j.m; ++m) std::memcpy(&padded[m * stride], j.x + m * j.k, 4 * j.k);
    j.x = padded.data();
    j.ldx = stride;
  }
  // Chunks of whole tiles with about 128 KiB of weights each (256 KiB for batches: every
  // activation block streams past a chunk's weights, so bigger chunks read the activations
  // fewer times), at least 4 per thread.
  const int64_t tile = j.m <= kMt ? kNt : kNtBig;
  const int64_t threads = threads::NumThreads();
  const int64_t chunk_bytes = j.m <= kMt ? int64_t{128} << 10 : int64_t{256} << 10;
  int64_t grain = std::max<int64_t>(tile, chunk_bytes / std::max<int64_t>(j.row_bytes, 1));
  grain = std::min(grain, (j.n + 4 * threads - 1) / (4 * threads));
  grain = std::max<int64_t>(tile, (grain + tile - 1) / tile * tile);
  // Large batches go in super-blocks of activation rows (at most about 8 MiB of them, so they stay
  // in L3 while every chunk of weights reads them); each super-block is one parallel pass over
  // the weights. Outputs are computed as in one pass: the split only changes the order of tiles.
  int64_t super_rows = j.m;
  if (j.m > kMt) {
    const int64_t mb = BlockRows(j.k);
    super_rows = std::max<int64_t>(mb, (int64_t{8} << 20) / std::max<int64_t>(4 * j.k, 1) / mb * mb);
  }
  for (int64_t m0 = 0; m0 < j.m; m0 += super_rows) {
    Job sub = j;
    sub.x = j.x + m0 * j.ldx;
    sub.y = j.y + m0 * j.n;
    sub.m = std::min(super_rows, j.m - m0);
    const auto rows = [&sub](int64_t r0, int64_t r1) { Rows<L>(sub, r0, r1); };
    const double work =
        static_cast<double>(sub.n) * static_cast<double>(sub.k) * static_cast<double>(sub.m);
    if (threads == 1 || work < 32768.0 || grain >= sub.n) {
      rows(0, sub.n);
    } else {
      threads::ParallelFor(sub.n, grain, rows);
    }
  }
}

Job MakeJob(const float* x, int64_t m, const WeightRef& w, float* y) {
  Job j;
  j.x = x;
  j.ldx = w.k;
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
  return j;
}

void Linear(const float* x_in, int64_t m, const WeightRef& w_in, float* y, float* scratch) {
  if (m <= 0 || w_in.n <= 0) return;
  // bf16 compute: the inputs rounded once per call (AVX2's rounding, exact), then the same
  // kernels.
  thread_local std::vector<float> rounded;
  const float* x = Bf16Input(x_in, m * w_in.k, w_in, rounded, avx2::RoundActivationsToBf16);
  const WeightRef w = WithoutBf16Flag(w_in);
  const Job j = MakeJob(x, m, w, y);
  switch (w.dtype) {
    case DType::kF32:
      LinearTyped<LoadF32>(j);
      break;
    case DType::kBF16:
      LinearTyped<LoadBF16>(j);
      break;
    case DType::kF16:
      LinearTyped<LoadF16>(j);
      break;
    case DType::kF8E4M3:
      LinearTyped<LoadF8>(j);
      break;
    default:
      RefKernels().linear(x, m, w, y, scratch);
      break;
  }
}

// ---- dequant_row ----

template <class L>
void DequantTyped(const Job& j, int64_t row, float* out) {
  const uint8_t* p = j.w + row * j.row_bytes;
  for (int64_t k0 = 0, kb = 0; k0 < j.k; k0 += j.block, ++kb) {
    const int64_t k1 = std::min(j.k, k0 + j.block);
    __m512 s = _mm512_setzero_ps();
    if constexpr (L::kFp8) s = _mm512_set1_ps(RowScale(j, row, kb));
    int64_t c = k0;
    for (; c + 16 <= k1; c += 16) {
      __m512 v = L::Full(p + c * L::kBytes);
      if constexpr (L::kFp8) v = _mm512_mul_ps(v, s);
      _mm512_storeu_ps(out + c, v);
    }
    if (c < k1) {
      const __mmask16 mask = TailMask(k1 - c);
      __m512 v = L::Part(p + c * L::kBytes, mask);
      if constexpr (L::kFp8) v = _mm512_mul_ps(v, s);
      _mm512_mask_storeu_ps(out + c, mask, v);
    }
  }
}

void DequantRow(const WeightRef& w, int64_t row, float* out) {
  const Job j = MakeJob(nullptr, 0, w, nullptr);
  switch (w.dtype) {
    case DType::kF32:
      DequantTyped<LoadF32>(j, row, out);
      break;
    case DType::kBF16:
      DequantTyped<LoadBF16>(j, row, out);
      break;
    case DType::kF16:
      DequantTyped<LoadF16>(j, row, out);
      break;
    case DType::kF8E4M3:
      DequantTyped<LoadF8>(j, row, out);
      break;
    default:
      RefKernels().dequant_row(w, row, out);
      break;
  }
}

// ---- transposed linear: y[m, c] = sum over r of x[m, r] * W[r, c] ----
// Each y lane is one f32 chain over r in order: acc = fma(x[m, r], w[r, c], acc). Register tiles
// of MR activation rows x CT 16-wide column chunks, so each weight chunk is loaded (and widened)
// once per MR rows: MLA's absorbed decode folds W_UK into a whole batch of queries with it. The
// tiling never changes a lane's chain, so a row's result does not depend on m.

constexpr int kCt = 4;  // 16-wide column chunks per tile
constexpr int kMtT = 4;  // activation rows per tile

template <class L, int MR, int CT>
void ColumnTileT(const Job& j, int64_t m0, int64_t c0, int64_t cols, float* y) {
  // cols <= CT * 16; the last chunk may be partial.
  __m512 acc[MR][CT], s[CT];
  for (int t = 0; t < CT; ++t) {
    s[t] = _mm512_setzero_ps();
    for (int i = 0; i < MR; ++i) acc[i][t] = _mm512_setzero_ps();
  }
  const int64_t full = cols / 16;
  const __mmask16 tail = TailMask(cols - full * 16);
  const int chunks = static_cast<int>(full + (tail != 0 ? 1 : 0));
  int64_t scale_row = -1;
  for (int64_t r = 0; r < j.n; ++r) {
    const uint8_t* row = j.w + r * j.row_bytes + c0 * L::kBytes;
    if constexpr (L::kFp8) {
      if ((j.scale_row0 + r) / j.block_n != scale_row) {  // a new row block: its scales here
        scale_row = (j.scale_row0 + r) / j.block_n;
        for (int t = 0; t < chunks; ++t)
          s[t] = _mm512_set1_ps(RowScale(j, r, (c0 + t * 16) / j.block));
      }
    }
    __m512 w[CT];
    for (int t = 0; t < CT; ++t) {
      if (t >= chunks) break;
      w[t] = t < full ? L::Full(row + t * 16 * L::kBytes) : L::Part(row + t * 16 * L::kBytes, tail);
      if constexpr (L::kFp8) w[t] = _mm512_mul_ps(w[t], s[t]);
    }
    for (int i = 0; i < MR; ++i) {
      const __m512 xr = _mm512_set1_ps(j.x[(m0 + i) * j.n + r]);
      for (int t = 0; t < CT; ++t) {
        if (t >= chunks) break;
        acc[i][t] = _mm512_fmadd_ps(xr, w[t], acc[i][t]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) StoreChunks(y + (m0 + i) * j.k + c0, acc[i], chunks, full, tail);
}

template <class L>
void LinearTTyped(const Job& j, float* y) {
  for (int64_t m0 = 0; m0 < j.m; m0 += kMtT) {
    WithRowCount<kMtT>(j.m - m0, [&]<int MR>() {
      for (int64_t c0 = 0; c0 < j.k; c0 += kCt * 16) {
        ColumnTileT<L, MR, kCt>(j, m0, c0, std::min<int64_t>(kCt * 16, j.k - c0), y);
      }
    });
  }
}

// x [m, w.n], y [m, w.k].
void TransposedLinear(const float* x_in, int64_t m, const WeightRef& w_in, float* y) {
  if (m <= 0 || w_in.k <= 0) return;
  thread_local std::vector<float> rounded;  // bf16 compute: the inputs rounded once per call
  const float* x = Bf16Input(x_in, m * w_in.n, w_in, rounded, avx2::RoundActivationsToBf16);
  const WeightRef w = WithoutBf16Flag(w_in);
  Job j = MakeJob(x, m, w, y);
  // A 16-wide chunk must not straddle two fp8 scale blocks; otherwise use the reference. The
  // choice depends on the weight only, so results stay independent of m.
  const bool fp8_ok = j.scale == nullptr || j.block % 16 == 0;
  switch (w.dtype) {
    case DType::kF32:
      LinearTTyped<LoadF32>(j, y);
      break;
    case DType::kBF16:
      LinearTTyped<LoadBF16>(j, y);
      break;
    case DType::kF16:
      LinearTTyped<LoadF16>(j, y);
      break;
    case DType::kF8E4M3:
      if (fp8_ok) {
        LinearTTyped<LoadF8>(j, y);
        break;
      }
      [[fallthrough]];
    default:
      RefKernels().transposed_linear(x, m, w, y);
      break;
  }
}

}  // namespace

void FillLinearKernels(KernelTable& t) {
  t.linear = Linear;
  t.dequant_row = DequantRow;
  t.transposed_linear = TransposedLinear;
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_END
