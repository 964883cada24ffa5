// AVX-512 DSA indexer scores (kernels/index_scores.h), vectorized across heads: the query is
// transposed once per call into qt [dim][heads rounded up to 16] (zero heads and weights pad it),
// so for KJ keys at once each dim costs one broadcast per key and one load per 16 heads, in
// register tiles of KJ keys x HC head vectors. Per key and head the dot is one f32 FMA chain over
// the dims in order; then per head vector relu(scale * dot) * w, added over the head vectors in
// order, and ReduceAdd. The padded heads add exact zeros. No horizontal sum per dot product
// (what a linear call over dim = 128 spends most of its time on). bf16 keys (rows read in place)
// are widened exactly, and fp8 keys decoded as the gather would, into a small buffer per tile of
// keys, so they score as the same keys in f32.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/index_scores_common.h"
#include "kernels/avx512/row_loads_avx512.h"
#include "kernels/kernel_table.h"

LATENT_AVX512_BEGIN
namespace latent::kernels::avx512 {
namespace {

constexpr int kHeadVectors = 4;  // head vectors per register tile (64 heads)
constexpr int kKeys = 4;         // keys per register tile

// total[j] += sum over the tile's HC head vectors (from head vector v0) of relu(scale * dot) * w.
template <int KJ, int HC>
void Tile(const IndexScoreArgs& a, const float* qt, int64_t hp, const float* w,
          const float* const* key, int64_t v0, __m512* total) {
  __m512 acc[KJ][HC];
  for (int j = 0; j < KJ; ++j)
    for (int v = 0; v < HC; ++v) acc[j][v] = _mm512_setzero_ps();
  for (int64_t c = 0; c < a.dim; ++c) {
    const float* row = qt + c * hp + v0 * 16;
    __m512 qv[HC];
    for (int v = 0; v < HC; ++v) qv[v] = _mm512_loadu_ps(row + 16 * v);
    for (int j = 0; j < KJ; ++j) {
      const __m512 kb = _mm512_set1_ps(key[j][c]);
      for (int v = 0; v < HC; ++v) acc[j][v] = _mm512_fmadd_ps(kb, qv[v], acc[j][v]);
    }
  }
  AddHeadScores<KJ, HC>(acc, a.scale, w, v0, total);
}

// The keys j0 .. j0 + KJ - 1 as f32: f32 rows themselves, bf16 rows widened (exactly) or fp8
// rows decoded into `widened` [KJ, dim].
template <int KJ>
void KeysAsF32(const IndexScoreArgs& a, int64_t j0, float* widened, const float** key) {
  for (int j = 0; j < KJ; ++j) {
    if (a.rows.dtype == DType::kF32) {
      key[j] = static_cast<const float*>(a.keys[j0 + j]);
      continue;
    }
    float* dst = widened + j * a.dim;
    if (a.rows.dtype == DType::kF8E4M3) {  // decoded as the gather would (row_loads_avx512.h)
      const uint8_t* src = static_cast<const uint8_t*>(a.keys[j0 + j]);
      for (int64_t c = 0; c < a.dim; c += 16) {
        const __mmask16 m = TailMask(std::min<int64_t>(16, a.dim - c));
        _mm512_mask_storeu_ps(dst + c, m, Fp8Rows::Part(a.rows, src, c, m));
      }
      key[j] = dst;
      continue;
    }
    const uint16_t* src = static_cast<const uint16_t*>(a.keys[j0 + j]);
    for (int64_t c = 0; c < a.dim; ++c) dst[c] = BF16ToF32(src[c]);
    key[j] = dst;
  }
}

template <int KJ>
void Keys(const IndexScoreArgs& a, const float* qt, int64_t hp, const float* w, int64_t j0,
          float* widened) {
  const float* key[KJ];
  KeysAsF32<KJ>(a, j0, widened, key);
  SumKeyScores<KJ, kHeadVectors>(a, hp, j0, [&]<int HC>(int64_t v0, __m512* total) {
    Tile<KJ, HC>(a, qt, hp, w, key, v0, total);
  });
}

void IndexScores(const IndexScoreArgs& a) {
  LATENT_CHECK(a.rows.dtype != DType::kF8E4M3 || RowsReadInPlace(a.rows));  // whole chunks
  const int64_t hp = (a.heads + 15) / 16 * 16;
  thread_local std::vector<float> qt, w, widened;  // [dim, hp], [hp], [kKeys, dim] (bf16, fp8 rows)
  qt.assign(a.dim * hp, 0.0f);
  w.assign(hp, 0.0f);
  for (int64_t h = 0; h < a.heads; ++h) {
    w[h] = a.w[h];
    for (int64_t c = 0; c < a.dim; ++c) qt[c * hp + h] = a.q[h * a.dim + c];
  }
  if (a.rows.dtype != DType::kF32 && static_cast<int64_t>(widened.size()) < kKeys * a.dim)
    widened.resize(kKeys * a.dim);
  int64_t j = 0;
  for (; j + kKeys <= a.n; j += kKeys) Keys<kKeys>(a, qt.data(), hp, w.data(), j, widened.data());
  for (; j < a.n; ++j) Keys<1>(a, qt.data(), hp, w.data(), j, widened.data());
}

}  // namespace

void FillIndexScoresKernel(KernelTable& t) { t.index_scores = IndexScores; }

}  // namespace latent::kernels::avx512
LATENT_AVX512_END
