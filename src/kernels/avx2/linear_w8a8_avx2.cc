// W8A8 linear on AVX2 (`--quantize w8a8` where the CPU has no AVX512-VNNI; the math is
// kernels/weight_ref.h's and ref/linear_w8a8_ref.cc's): int8 weights [n, k] row-major with f32 row
// scales; the activations quantized per row at each call by the weights' rule
// (kernels/quantize_row.h) with the same f32 operations, so to the same int8 values and scales.
//
// The dot product takes 32 columns per vpmaddubsw (u8 x s8, adjacent products summed to int16),
// which saturates its int16 sums unless both factors stay small: it multiplies |q| (vpabsb: 0 ..
// 128 as u8) by xq carrying q's sign (vpsignb; |xq| <= 127 by the quantizer's clamp), so each sum
// of two products is at most 2 * 128 * 127 = 32512 and exact; vpmaddwd by ones widens adjacent
// pairs to the int32 lanes of the accumulator. (llama.cpp's AVX2 Q8_0 dot uses the same sign
// trick per 32-column block in f32; here a whole row stays integer.)
//
//   dot[m, r] = sum of the accumulator's lanes = sum over c of xq[m, c] * q[r, c]
//   y[m, r]   = float(dot[m, r]) * (sx[m] * s[r])   (the reference's formula)
//
// Integer sums are exact in any order, so the tiles, the k tail and the thread split never change
// a result: every output equals the reference's bit for bit and is batch invariant. Per pair of
// 32 columns: vpsignb, vpmaddubsw, vpmaddwd, vpaddd for 32 products, against 4 FMAs in f32.
//
// The weights are read from the packed copy the loader makes with this table's pack (W8A8Pack),
// one stream per block of 4 rows:
//
//   packed [ceil(n / 4) blocks][ceil(k / 32) steps][4 rows][32 int8]   (zero past n and k)
//
// or, unpacked (tests, LATENT_GEMM=avx2, AVX-512 CPUs without VNNI), as stored, row-major. A
// decode step reads each weight once, and with rows of a few KiB each row is a short stream the
// hardware prefetcher barely learns before it ends: bench/kernels, Zen 3, m = 1, n 4096 x k
// 2048: 11.2 GB/s from the rows as stored, 16.3 from the packed copy on 1 thread; 18.9 and 27.5
// on 2 (bench/read_bw: 30).
//
// Shapes: decode (m <= 4) streams every weight once, MT x NT register tiles of 1 x 4, 2 x 4,
// 3 x 2 and 4 x 2 with software prefetch; batches keep blocks of activation rows in L2 and run
// 4 x 2 tiles (8 int32 accumulators; both weight rows and their |q| in registers) over all of k,
// each weight tile read from memory by the block's first M-tile and from L1 by the others.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/activation_rows.h"
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/ref/linear_w8a8_ref.h"
#include "threads/thread_pool.h"
// Last: defines the AVX2 helpers under the target pragma.
#include "kernels/avx2/avx2_common.h"

LATENT_AVX2_BEGIN
namespace latent::kernels::avx2 {
namespace {

#include "kernels/blocked_rows.inc"

constexpr int64_t kStep = 32;        // columns per vpmaddubsw
constexpr int64_t kBlockRows = 4;    // weight rows per packed block
constexpr int64_t kMtDecode = 4;     // m <= this: decode tiles
constexpr int kMt = 4;               // batches: activation rows per tile
constexpr int kNt = 2;               // batches: weight rows per tile (half a packed block)
constexpr int64_t kPrefetch = 2048;  // bytes ahead within a streamed weight row or block
constexpr int64_t kBlockBytes = int64_t{256} << 10;  // batches: activation bytes per L2 block

// Weight rows per decode tile: 4 (a packed block) while the accumulators and the rows' |q| fit
// the 16 ymm, else 2.
template <int MT>
constexpr int kDecodeNt = MT <= 2 ? 4 : 2;

// Rows below are "weight rows": the view's rows as stored (row-major), or the packed copy's rows
// (packed: the view's row r is packed row row0 + r, and the kernel runs whole blocks, writing
// only the outputs of rows inside the view).
struct Job {
  const int8_t* x;  // [m, kp] quantized activations, zero past k
  const float* sx;  // [m] their row scales
  int64_t kp, m;
  const int8_t* q;  // row-major: [n, k] the view's rows; packed: block 0 of the packed copy
  bool packed;
  int64_t k, block_bytes;  // block_bytes: one packed block (kp / 32 steps of 128 bytes)
  int64_t row0, n;         // the view: weight rows [row0, row0 + n) are y's columns 0 .. n - 1
  const uint8_t* scale;    // f32 [n] (the view's rows), possibly unaligned
  float* y;                // [m, n]

  // Weight row `row`'s 32 columns of step 0; the others follow at StepBytes().
  const int8_t* RowStart(int64_t row) const {
    if (!packed) return q + row * k;
    return q + row / kBlockRows * block_bytes + row % kBlockRows * kStep;
  }
  int64_t StepBytes() const { return packed ? kBlockRows * kStep : kStep; }
};

// acc += the 8 int32 sums of q[c] * x[c] over 4 adjacent columns each, for the 32 int8 weights at
// q (read in place by vpsignb: a register fewer per weight row) and abs_q = |q|. In asm: with
// intrinsics GCC merges the products of two steps before adding them to the accumulators, and
// with DotSteps' named accumulators keeps them in registers (bench/kernels, Zen 3, n 4096 x k
// 2048 from memory, 2 threads, GOP/s: m 4 131-142 -> 165, m 8 163-170 -> 215, m 64 231 -> 241).
inline void Dot32(__m256i& acc, __m256i abs_q, const int8_t* q, __m256i x, __m256i ones) {
  __m256i t;
  __asm__(
      "vpsignb %[q], %[x], %[t]\n\t"        // t = x with q's sign
      "vpmaddubsw %[t], %[abs_q], %[t]\n\t"  // |q| (u8) * t (s8), adjacent pairs summed
      "vpmaddwd %[ones], %[t], %[t]\n\t"     // adjacent int16 pairs summed into int32
      "vpaddd %[t], %[acc], %[acc]"
      : [acc] "+x"(acc), [t] "=&x"(t)
      : [q] "m"(*reinterpret_cast<const __m256i_u*>(q)), [x] "x"(x), [abs_q] "x"(abs_q),
        [ones] "x"(ones));
}

inline __m256i Load32(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline int32_t ReduceAddI32(__m256i v) {
  __m128i b = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  b = _mm_add_epi32(b, _mm_shuffle_epi32(b, _MM_SHUFFLE(1, 0, 3, 2)));
  b = _mm_add_epi32(b, _mm_shuffle_epi32(b, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(b);
}

// Where a run of steps prefetches: `lead` its own weights this far ahead (0: none), `next` the
// next tile's at the same offsets (0: none); `lines` cache lines per step (packed: the tile's
// share of a block step, contiguous), or 0: one per row (row-major, every other step redundant).
struct Prefetch {
  int64_t lead, next, lines;
};

// acc[a][b] += the dot of activation row a's columns c0 .. c0 + 32 * steps with weight row b's,
// whose step s starts at rows[b] + s * step_bytes (acc[a][b]'s 8 lanes; their sum is the dot).
// The accumulators are named registers, not an array: GCC kept a 4 x 2 array of them on the
// stack, loaded and stored at every step.
template <int MT, int NT, bool kPrefetches>
inline __attribute__((always_inline)) void DotSteps(const int8_t* const* xs, int64_t c0,
                                                    const int8_t* const* rows, int64_t step_bytes,
                                                    int64_t steps, const Prefetch& pf,
                                                    __m256i (&acc)[MT][NT]) {
  static_assert(MT >= 1 && MT <= 4 && NT >= 1 && NT <= 4 && MT * NT <= 8);
  const __m256i ones = _mm256_set1_epi16(1);
  // clang-format off
#define LATENT_W8A8_ACC(a, b) \
  __m256i acc##a##b = _mm256_setzero_si256(); \
  if constexpr (MT > a && NT > b) acc##a##b = acc[a][b];
#define LATENT_W8A8_ROW(a) \
  LATENT_W8A8_ACC(a, 0) LATENT_W8A8_ACC(a, 1) LATENT_W8A8_ACC(a, 2) LATENT_W8A8_ACC(a, 3)
  LATENT_W8A8_ROW(0) LATENT_W8A8_ROW(1) LATENT_W8A8_ROW(2) LATENT_W8A8_ROW(3)
#undef LATENT_W8A8_ROW
#undef LATENT_W8A8_ACC
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t offset = s * step_bytes;
    for (const int64_t ahead : {pf.lead, pf.next}) {
      if (!kPrefetches || ahead == 0) continue;
      if (pf.lines == 0) {
        for (int b = 0; b < NT; ++b)
          _mm_prefetch(reinterpret_cast<const char*>(rows[b] + offset + ahead), _MM_HINT_T0);
      } else {
        for (int64_t line = 0; line < pf.lines; ++line) {
          _mm_prefetch(reinterpret_cast<const char*>(rows[0] + offset + 64 * line + ahead),
                       _MM_HINT_T0);
        }
      }
    }
    const int64_t c = c0 + s * kStep;
#define LATENT_W8A8_ABS(b) \
    __m256i abs##b = _mm256_setzero_si256(); \
    if constexpr (NT > b) abs##b = _mm256_abs_epi8(Load32(rows[b] + offset));
    LATENT_W8A8_ABS(0) LATENT_W8A8_ABS(1) LATENT_W8A8_ABS(2) LATENT_W8A8_ABS(3)
#undef LATENT_W8A8_ABS
#define LATENT_W8A8_DOT(a, b) \
      if constexpr (NT > b) Dot32(acc##a##b, abs##b, rows[b] + offset, x##a, ones);
#define LATENT_W8A8_ROW(a) \
    if constexpr (MT > a) { \
      const __m256i x##a = Load32(xs[a] + c); \
      LATENT_W8A8_DOT(a, 0) LATENT_W8A8_DOT(a, 1) LATENT_W8A8_DOT(a, 2) LATENT_W8A8_DOT(a, 3) \
    }
    LATENT_W8A8_ROW(0) LATENT_W8A8_ROW(1) LATENT_W8A8_ROW(2) LATENT_W8A8_ROW(3)
#undef LATENT_W8A8_ROW
#undef LATENT_W8A8_DOT
  }
#define LATENT_W8A8_OUT(a, b) if constexpr (MT > a && NT > b) acc[a][b] = acc##a##b;
#define LATENT_W8A8_ROW(a) \
  LATENT_W8A8_OUT(a, 0) LATENT_W8A8_OUT(a, 1) LATENT_W8A8_OUT(a, 2) LATENT_W8A8_OUT(a, 3)
  LATENT_W8A8_ROW(0) LATENT_W8A8_ROW(1) LATENT_W8A8_ROW(2) LATENT_W8A8_ROW(3)
#undef LATENT_W8A8_ROW
#undef LATENT_W8A8_OUT
  // clang-format on
}

// MT activation rows (from m0) x NT weight rows (from n0) over all of k. `lead`: prefetch these
// rows kPrefetch ahead (they stream from memory); `next`: prefetch the next tile's rows at the
// same offsets.
template <int MT, int NT>
void Tile(const Job& j, int64_t m0, int64_t n0, bool lead, bool next) {
  const int8_t* rows[NT];
  for (int b = 0; b < NT; ++b) rows[b] = j.RowStart(n0 + b);
  const int8_t* xs[MT];
  for (int a = 0; a < MT; ++a) xs[a] = j.x + (m0 + a) * j.kp;
  Prefetch pf;
  pf.lead = lead ? kPrefetch : 0;
  pf.next = next ? j.RowStart(n0 + NT) - rows[0] : 0;
  pf.lines = j.packed ? (NT * kStep + 63) / 64 : 0;
  __m256i acc[MT][NT];
  for (int a = 0; a < MT; ++a)
    for (int b = 0; b < NT; ++b) acc[a][b] = _mm256_setzero_si256();
  const int64_t steps = j.packed ? j.kp / kStep : j.k / kStep;  // whole steps in memory
  if (lead || next) {
    DotSteps<MT, NT, true>(xs, 0, rows, j.StepBytes(), steps, pf, acc);
  } else {  // a batch's M-tile after the block's first: its weights are in L1
    DotSteps<MT, NT, false>(xs, 0, rows, j.StepBytes(), steps, pf, acc);
  }
  if (steps * kStep < j.k) {  // row-major's tail: copied with zeros past k (never read past rows)
    alignas(32) int8_t tail[NT][kStep] = {};
    const int64_t c = steps * kStep;
    for (int b = 0; b < NT; ++b) std::memcpy(tail[b], rows[b] + c, static_cast<size_t>(j.k - c));
    const int8_t* tails[NT];
    for (int b = 0; b < NT; ++b) tails[b] = tail[b];
    DotSteps<MT, NT, false>(xs, c, tails, 0, 1, Prefetch{0, 0, 0}, acc);
  }
  for (int b = 0; b < NT; ++b) {
    const int64_t col = n0 + b - j.row0;
    if (col < 0 || col >= j.n) continue;  // a packed block's row outside the view
    float sw;
    std::memcpy(&sw, j.scale + 4 * col, 4);
    for (int a = 0; a < MT; ++a) {
      const float dot_ab = static_cast<float>(ReduceAddI32(acc[a][b]));
      j.y[(m0 + a) * j.n + col] = dot_ab * (j.sx[m0 + a] * sw);
    }
  }
}

template <int NT>
void TileAnyM(const Job& j, int64_t m0, int64_t mt, int64_t n0, bool lead, bool next) {
  WithRowCount<kMt>(mt, [&]<int MT>() { Tile<MT, NT>(j, m0, n0, lead, next); });
}

// Decode (m <= 4): weight rows [r0, r1) read once, straight from memory.
void RowsDecode(const Job& j, int64_t r0, int64_t r1) {
  WithRowCount<kMtDecode>(j.m, [&]<int MT>() {
    constexpr int NT = kDecodeNt<MT>;
    int64_t n = r0;
    for (; n + NT <= r1; n += NT) Tile<MT, NT>(j, 0, n, true, false);
    for (; n < r1; ++n) Tile<MT, 1>(j, 0, n, true, false);
  });
}

// Batches: weight rows [r0, r1) against blocks of activation rows that stay in L2.
void RowsBatch(const Job& j, int64_t r0, int64_t r1) {
  const int64_t most =
      std::max<int64_t>(2 * kMt, kBlockBytes / std::max<int64_t>(j.kp, 1) / kMt * kMt);
  BlockedRows<kMt, kNt>(j.m, most, r0, r1,
                        [&]<int NT>(int64_t m0, int64_t mt, int64_t n0, bool lead, bool next) {
                          TileAnyM<NT>(j, m0, mt, n0, lead, next);
                        });
}

// One activation row to int8 (zero-padded to kp); returns its scale. The same f32 operations as
// QuantizeRowInt8: max of |x| (vmaxps returns its second operand, the running max, when x is NaN,
// as std::max does), scale = max / 127 (a quiet NaN when the row holds a NaN, with every value
// 0), x / scale (vdivps, IEEE), rounded to nearest even, clamped to [-127, 127].
float QuantizeRow(const float* x, int64_t k, int64_t kp, int8_t* out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  __m256 nan = _mm256_setzero_ps();  // all-ones lanes where a NaN was seen
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    amax = _mm256_max_ps(_mm256_and_ps(v, abs_mask), amax);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  if (c < k) {
    const __m256 v = LoadPart(x + c, k - c);
    amax = _mm256_max_ps(_mm256_and_ps(v, abs_mask), amax);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  const bool has_nan = _mm256_movemask_ps(nan) != 0;
  const float scale = has_nan ? std::numeric_limits<float>::quiet_NaN() : ReduceMax(amax) / 127.0f;
  if (!(scale > 0.0f)) {  // all zeros, or a NaN: the outputs 0, or NaN through the scale
    std::memset(out, 0, static_cast<size_t>(kp));
    return has_nan ? scale : 0.0f;
  }
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  for (c = 0; c < k; c += 8) {
    const int64_t count = std::min<int64_t>(8, k - c);
    const __m256 v = count == 8 ? _mm256_loadu_ps(x + c) : LoadPart(x + c, count);
    __m256 r = _mm256_round_ps(_mm256_div_ps(v, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));  // NaN -> 0
    r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
    const __m256i i32 = _mm256_cvtps_epi32(r);
    const __m128i i16 =
        _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
    const __m128i i8 = _mm_packs_epi16(i16, i16);  // lanes 0..7: the 8 values (within range)
    if (count == 8) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + c), i8);
    } else {
      alignas(16) int8_t part[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(part), i8);
      std::memcpy(out + c, part, static_cast<size_t>(count));
    }
  }
  if (kp > k) std::memset(out + k, 0, static_cast<size_t>(kp - k));
  return scale;
}

int64_t PackedBlockBytes(int64_t k) { return (k + kStep - 1) / kStep * kBlockRows * kStep; }

int64_t PackedBytes(const WeightRef& w) {
  return (w.n + kBlockRows - 1) / kBlockRows * PackedBlockBytes(w.k);
}

}  // namespace

void W8A8Pack(const WeightRef& w, void* out) {
  const int64_t n = w.n, k = w.k, block_bytes = PackedBlockBytes(k);
  const auto* q = static_cast<const int8_t*>(w.data);  // [n, k]
  auto* packed = static_cast<int8_t*>(out);
  threads::ParallelFor((n + kBlockRows - 1) / kBlockRows, 16, [&](int64_t b0, int64_t b1) {
    std::memset(packed + b0 * block_bytes, 0, static_cast<size_t>((b1 - b0) * block_bytes));
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t r = 0; r < kBlockRows && b * kBlockRows + r < n; ++r) {
        const int8_t* row = q + (b * kBlockRows + r) * k;
        int8_t* dst = packed + b * block_bytes + r * kStep;
        for (int64_t c = 0; c < k; c += kStep) {
          std::memcpy(dst + c / kStep * kBlockRows * kStep, row + c,
                      static_cast<size_t>(std::min(kStep, k - c)));
        }
      }
    }
  });
}

void FillW8A8Packing(KernelTable& table) {
  AddPacking<IsW8A8, PackedBytes, W8A8Pack, PackedLayout::kW8A8Avx2Blocks>(table);
}

void LinearW8A8(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  Job j;
  j.kp = (w.k + kStep - 1) / kStep * kStep;
  const int64_t k = w.k, kp = j.kp;
  const auto [xq, sx] = QuantizeActivationRows<int8_t>(
      x, m, k, kp, [k, kp](const float* row, int8_t* out) { return QuantizeRow(row, k, kp, out); });
  const int64_t threads = threads::NumThreads();
  j.x = xq;
  j.sx = sx;
  j.m = m;
  j.packed = w.ReadsPacked(PackedLayout::kW8A8Avx2Blocks);
  j.q = static_cast<const int8_t*>(j.packed ? w.packed : w.data);
  j.k = w.k;
  j.block_bytes = PackedBlockBytes(w.k);
  j.row0 = j.packed ? w.packed_row0 : 0;
  j.n = w.n;
  j.scale = static_cast<const uint8_t*>(w.scale) + 4 * w.scale_row0;
  j.y = y;
  // The weight rows to run: the view's, or the packed blocks that hold them.
  const int64_t first = j.packed ? j.row0 / kBlockRows * kBlockRows : 0;
  const int64_t end = j.packed ? (j.row0 + j.n + kBlockRows - 1) / kBlockRows * kBlockRows : j.n;
  const bool decode = m <= kMtDecode;
  // Threads take chunks of whole 4-row units (every tile's multiple; packed: whole blocks).
  const auto units = [&j, decode, first, end](int64_t u0, int64_t u1) {
    const int64_t r0 = first + u0 * kBlockRows, r1 = std::min(end, first + u1 * kBlockRows);
    if (decode) {
      RowsDecode(j, r0, r1);
    } else {
      RowsBatch(j, r0, r1);
    }
  };
  const int64_t count = (end - first + kBlockRows - 1) / kBlockRows;
  // About 128 KiB of weights per chunk, at least 4 chunks per thread.
  int64_t grain = std::max<int64_t>(1, (int64_t{32} << 10) / std::max<int64_t>(j.k, 1));
  grain = std::max<int64_t>(1, std::min(grain, (count + 4 * threads - 1) / (4 * threads)));
  const double work = static_cast<double>(j.n) * static_cast<double>(j.k) * static_cast<double>(m);
  if (threads == 1 || work < 32768.0 || grain >= count) {
    units(0, count);
    return;
  }
  threads::ParallelFor(count, grain, units);
}

}  // namespace latent::kernels::avx2
LATENT_AVX2_END
