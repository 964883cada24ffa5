// Opt-in linear over bf16 weights with bf16 activations and vdpbf16ps (AVX512_BF16): the
// activations are rounded to bf16 (round to nearest even) once per call, and every output is
//
//   acc = 0 (f32x16); for each 32-wide chunk of k in order: acc = vdpbf16ps(acc, x, w); ReduceAdd
//
// (the last chunk zero-padded). No weight conversion and twice the flops per instruction of the
// f32 path, at the cost of rounding the activations to bf16 (about 3 significant digits, and
// denormal inputs flushed to zero). On AVX512_BF16 CPUs the default table runs it for bf16
// weights loaded for bf16 compute (WeightRef::bf16_activations, `--precision bf16`, the default
// for bf16 checkpoints); LATENT_BF16_DOT=1 runs it for every bf16 weight, also under
// `--precision f32` (dispatch.cc). The sequence is the same whatever M is and however tiles and threads split the work,
// so it is batch invariant like the f32 path (vdpbf16ps ignores MXCSR: fixed rounding, denormals
// flushed).
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/bf16_target.h"
#include "kernels/kernel_table.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

LATENT_AVX512_BF16_BEGIN
#include "kernels/avx512/avx512_common.h"

namespace latent::kernels::avx512 {
namespace {

constexpr int kNt = 4;         // weight rows per tile
constexpr int kMt = 6;         // activation rows per tile (6 x 4 accumulators)
constexpr int64_t kPf = 2048;  // prefetch distance in bytes within a row

struct DotJob {
  const uint16_t* x;  // [m, kp] bf16, zero-padded to kp (a multiple of 32)
  int64_t kp;
  int64_t m;
  const uint8_t* w;  // [n, k] bf16
  int64_t n, k;
  int64_t row_bytes;
  float* y;  // [m, n]
};

inline __m512 Dot(__m512 acc, __m512i x, __m512i w) {
  return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
}

// MT activation rows x NT weight rows over all of k. `next`: the next tile's rows are prefetched
// at the same offsets (the first M-tile of a weight tile, which streams it from memory).
template <int MT, int NT>
void Tile(const DotJob& j, int64_t m0, int64_t n0, bool lead, bool next) {
  const uint8_t* rows[NT];
  for (int b = 0; b < NT; ++b) rows[b] = j.w + (n0 + b) * j.row_bytes;
  const uint16_t* xs[MT];
  for (int a = 0; a < MT; ++a) xs[a] = j.x + (m0 + a) * j.kp;
  const int64_t ahead = NT * j.row_bytes;
  __m512 acc[MT][NT];
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) acc[a][b] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 32 <= j.k; c += 32) {  // 32 bf16 = one cache line of each row when aligned
    if (lead) {
      for (int b = 0; b < NT; ++b)
        _mm_prefetch(reinterpret_cast<const char*>(rows[b] + 2 * c + kPf), _MM_HINT_T0);
    }
    if (next) {
      for (int b = 0; b < NT; ++b)
        _mm_prefetch(reinterpret_cast<const char*>(rows[b] + 2 * c + ahead), _MM_HINT_T0);
    }
    __m512i w[NT];
    for (int b = 0; b < NT; ++b) w[b] = _mm512_loadu_si512(rows[b] + 2 * c);
    for (int a = 0; a < MT; ++a) {
      const __m512i xv = InRegister(_mm512_loadu_si512(xs[a] + c));
      for (int b = 0; b < NT; ++b) acc[a][b] = Dot(acc[a][b], xv, w[b]);
    }
  }
  if (c < j.k) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (j.k - c)) - 1);
    __m512i w[NT];
    for (int b = 0; b < NT; ++b) w[b] = _mm512_maskz_loadu_epi16(mask, rows[b] + 2 * c);
    for (int a = 0; a < MT; ++a) {
      const __m512i xv = _mm512_loadu_si512(xs[a] + c);  // zero-padded
      for (int b = 0; b < NT; ++b) acc[a][b] = Dot(acc[a][b], xv, w[b]);
    }
  }
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) j.y[(m0 + a) * j.n + n0 + b] = ReduceAdd(acc[a][b]);
}

template <int NT>
void TileAnyM(const DotJob& j, int64_t m0, int64_t mt, int64_t n0, bool lead, bool next) {
  WithRowCount<kMt>(mt, [&]<int MT>() { Tile<MT, NT>(j, m0, n0, lead, next); });
}

// Weight rows [r0, r1) in blocks of activation rows that stay in L2 (256 KiB of bf16): per
// block, each tile of kNt weight rows is read by the block's first M-tile (from memory for the
// first block, which also prefetches the next tile; from L2 after) and from L1 by the others.
void Rows(const DotJob& j, int64_t r0, int64_t r1) {
  const int64_t most = std::max<int64_t>(
      2 * kMt, ((int64_t{256} << 10) / std::max<int64_t>(2 * j.kp, 1)) / kMt * kMt);
  BlockedRows<kMt, kNt>(j.m, most, r0, r1,
                        [&]<int NT>(int64_t m0, int64_t mt, int64_t n0, bool lead, bool next) {
                          TileAnyM<NT>(j, m0, mt, n0, lead, next);
                        });
}

// f32 -> bf16, round to nearest even (NaN stays NaN), zero-padded to kp.
void RoundRows(const float* x, int64_t m, int64_t k, int64_t kp, uint16_t* out) {
  for (int64_t r = 0; r < m; ++r) {
    const float* src = x + r * k;
    uint16_t* dst = out + r * kp;
    int64_t c = 0;
    for (; c + 32 <= k; c += 32) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + c + 16), _mm512_loadu_ps(src + c));
      _mm512_storeu_si512(dst + c, (__m512i)v);
    }
    for (; c < kp; c += 16) {
      const int64_t left = std::max<int64_t>(0, std::min<int64_t>(16, k - c));
      const __m512 v = _mm512_maskz_loadu_ps(TailMask(left), src + c);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), (__m256i)_mm512_cvtneps_pbh(v));
    }
  }
}

}  // namespace

// y[m, n] = bf16(x)[m, k] . W[n, k]^T for bf16 W.
void LinearBf16Dot(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  DotJob j;
  j.kp = (w.k + 31) / 32 * 32;
  thread_local std::vector<uint16_t> xb;
  if (static_cast<int64_t>(xb.size()) < m * j.kp + 32) xb.resize(m * j.kp + 32);
  RoundRows(x, m, w.k, j.kp, xb.data());
  j.x = xb.data();
  j.m = m;
  j.w = static_cast<const uint8_t*>(w.data);
  j.n = w.n;
  j.k = w.k;
  j.row_bytes = 2 * w.k;
  j.y = y;
  const auto rows = [&j](int64_t r0, int64_t r1) { Rows(j, r0, r1); };
  const int64_t threads = threads::NumThreads();
  int64_t grain = std::max<int64_t>(kNt, (int64_t{128} << 10) / std::max<int64_t>(j.row_bytes, 1));
  grain = std::min(grain, (j.n + 4 * threads - 1) / (4 * threads));
  grain = std::max<int64_t>(kNt, (grain + kNt - 1) / kNt * kNt);
  const double work = static_cast<double>(j.n) * static_cast<double>(j.k) * static_cast<double>(m);
  if (threads == 1 || work < 32768.0 || grain >= j.n) {
    rows(0, j.n);
    return;
  }
  threads::ParallelFor(j.n, grain, rows);
}

// The kernels each wrapper hands the other weights to (the table's linear before it wrapped it).
void (*g_linear_every)(const float*, int64_t, const WeightRef&, float*, float*) = nullptr;
void (*g_linear_asked)(const float*, int64_t, const WeightRef&, float*, float*) = nullptr;

// LATENT_BF16_DOT=1: every bf16 weight, whatever its bf16_activations says.
void LinearBf16DotOrF32(const float* x, int64_t m, const WeightRef& w, float* y, float* scratch) {
  if (w.dtype == DType::kBF16) {
    LinearBf16Dot(x, m, w, y);
  } else {
    g_linear_every(x, m, w, y, scratch);
  }
}

// The default on AVX512_BF16 CPUs: bf16 weights loaded for bf16 compute (`--precision bf16`,
// WeightRef::bf16_activations), which ask for exactly this kernel's bf16(x) . W^T.
void LinearBf16DotIfAsked(const float* x, int64_t m, const WeightRef& w, float* y,
                          float* scratch) {
  if (w.dtype == DType::kBF16 && w.bf16_activations) {
    LinearBf16Dot(x, m, w, y);
  } else {
    g_linear_asked(x, m, w, y, scratch);
  }
}

void FillBf16DotLinear(KernelTable& t, bool every_bf16_weight) {
  if (every_bf16_weight) {
    g_linear_every = t.linear;
    t.linear = LinearBf16DotOrF32;
  } else {
    g_linear_asked = t.linear;
    t.linear = LinearBf16DotIfAsked;
  }
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_BF16_END
