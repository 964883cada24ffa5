// DSA indexer scores (kernels/index_scores.h) on vdpbf16ps, under IndexScoreArgs::bf16_products
// (bf16 compute): the query rounded to bf16, the bf16 key rows read in place as pairs, each dot
// summed in f32 over pairs of dims in order. DeepSeek's own indexer runs in fp8; transformers in
// bf16 rounds the query, the keys and the scores themselves. This halves the instructions of the
// f32 kernel (index_scores_avx512.cc: one FMA per dim) and drops its widening of every key.
//
// Layout as in the f32 kernel: the query transposed once per call, here into qt [dim / 2][hp] of
// bf16 pairs (lane h of pair c2 holds heads h's dims 2 c2 and 2 c2 + 1; zero heads pad it to hp),
// register tiles of KJ keys x HC head vectors, one broadcast of a key's pair per key and pair.
// Per key and head the dot is one chain over the pairs in order; then relu(scale * dot) * w
// added over the head vectors in order, and ReduceAdd: a key's score depends on the key and the
// query only (not on the run or the thread), as kernels/index_scores.h requires.
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/avx512/avx512_kernels.h"
#include "kernels/avx512/bf16_target.h"
#include "kernels/kernel_table.h"
#include "tensor/dtype.h"

LATENT_AVX512_BF16_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/index_scores_common.h"

namespace latent::kernels::avx512 {
namespace {

constexpr int kBf16IndexHeadVectors = 4;  // head vectors per register tile (64 heads)
constexpr int kBf16IndexKeys = 4;         // keys per register tile

// total[j] += sum over the tile's HC head vectors (from head vector v0) of relu(scale * dot) * w.
template <int KJ, int HC>
void Bf16IndexTile(const IndexScoreArgs& a, const uint32_t* qt, int64_t hp, const float* w,
                   const uint16_t* const* key, int64_t v0, __m512* total) {
  __m512 acc[KJ][HC];
  for (int j = 0; j < KJ; ++j) {
    for (int v = 0; v < HC; ++v) acc[j][v] = _mm512_setzero_ps();
  }
  for (int64_t c2 = 0; c2 < a.dim / 2; ++c2) {
    const uint32_t* row = qt + c2 * hp + v0 * 16;
    __m512i qv[HC];
    for (int v = 0; v < HC; ++v) qv[v] = _mm512_loadu_si512(row + 16 * v);
    for (int j = 0; j < KJ; ++j) {
      int32_t pair;
      std::memcpy(&pair, key[j] + 2 * c2, 4);
      const __m512bh kb = (__m512bh)_mm512_set1_epi32(pair);
      for (int v = 0; v < HC; ++v) acc[j][v] = _mm512_dpbf16_ps(acc[j][v], kb, (__m512bh)qv[v]);
    }
  }
  AddHeadScores<KJ, HC>(acc, a.scale, w, v0, total);
}

template <int KJ>
void Bf16IndexKeys(const IndexScoreArgs& a, const uint32_t* qt, int64_t hp, const float* w,
                   int64_t j0) {
  const uint16_t* key[KJ];
  for (int j = 0; j < KJ; ++j) key[j] = static_cast<const uint16_t*>(a.keys[j0 + j]);
  SumKeyScores<KJ, kBf16IndexHeadVectors>(a, hp, j0, [&]<int HC>(int64_t v0, __m512* total) {
    Bf16IndexTile<KJ, HC>(a, qt, hp, w, key, v0, total);
  });
}

// Over bf16 key rows of an even dim (the only calls Bf16IndexScoresRun takes).
void Bf16IndexScores(const IndexScoreArgs& a) {
  const int64_t hp = (a.heads + 15) / 16 * 16;
  thread_local std::vector<uint32_t> qt_buffer;  // [dim / 2, hp] bf16 pairs
  thread_local std::vector<float> w_buffer;      // [hp]
  std::vector<uint32_t>& qt = qt_buffer;
  std::vector<float>& w = w_buffer;
  qt.resize(a.dim / 2 * hp);
  w.resize(hp);
  PackIndexQuery(a, hp, a.dim / 2, qt.data(), w.data());
  int64_t j = 0;
  for (; j + kBf16IndexKeys <= a.n; j += kBf16IndexKeys) {
    Bf16IndexKeys<kBf16IndexKeys>(a, qt.data(), hp, w.data(), j);
  }
  for (; j < a.n; ++j) Bf16IndexKeys<1>(a, qt.data(), hp, w.data(), j);
}

}  // namespace

bool Bf16TakesIndexScores(const IndexScoreArgs& a) {
  return a.bf16_products && a.rows.dtype == DType::kBF16 && a.dim % 2 == 0;
}

void FillBf16IndexScores(KernelTable& t) {
  static void (*other)(const IndexScoreArgs&) = nullptr;  // the table's kernel before this call
  other = t.index_scores;
  t.index_scores = [](const IndexScoreArgs& a) {
    if (Bf16TakesIndexScores(a)) {
      Bf16IndexScores(a);
    } else {
      other(a);
    }
  };
}

}  // namespace latent::kernels::avx512
LATENT_AVX512_BF16_END
