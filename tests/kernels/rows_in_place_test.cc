// Cache rows read in place: every attention and index-score kernel (the reference, AVX-512,
// AVX2) over bf16 rows must give, bit for bit, what it gives over the same rows converted to f32
// (what the engine fed it before it read the paged rows in place, and still feeds it for a row
// type the kernels do not read: kernels/attention.h). Shapes with tails, unaligned rows (odd
// element offsets), rows in shuffled storage order, several segments, per-head and shared heads,
// sinks. About 1 s in all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/index_scores.h"
#include "kernels/kernel_table.h"
#include "tensor/dtype.h"
#include "kernel_test_util.h"

namespace latent::kernels {
namespace {

using testing::RandomFloats;
using testing::ThreadCount;

const KernelTable* RefTable() { return &RefKernels(); }

class RowsInPlace : public ::testing::TestWithParam<testing::FastTable> {};

INSTANTIATE_TEST_SUITE_P(
    Isa, RowsInPlace,
    ::testing::Values(testing::FastTable{"ref", RefTable, ""},
                      testing::Avx512Table(),
                      testing::Avx2Table()),
    testing::FastTableName);

// The same random values stored twice: as bf16 bits and as those values in f32 (exact).
struct Store {
  std::vector<uint16_t> bf16;
  std::vector<float> f32;
};

Store MakeStore(std::mt19937& rng, int64_t n, float lo, float hi) {
  Store s;
  for (float v : RandomFloats(rng, n, lo, hi)) {
    s.bf16.push_back(F32ToBF16(v));
    s.f32.push_back(BF16ToF32(s.bf16.back()));
  }
  return s;
}

// Row pointers into both copies: position t -> element offset[t] of each.
struct RowPtrs {
  std::vector<const void*> bf16, f32;
};

RowPtrs PointInto(const Store& s, const std::vector<int64_t>& offset) {
  RowPtrs p;
  for (int64_t o : offset) {
    p.bf16.push_back(&s.bf16[o]);
    p.f32.push_back(&s.f32[o]);
  }
  return p;
}

// Offsets of `length` rows `stride` elements apart, in shuffled order, at an odd element offset
// (unaligned rows).
std::vector<int64_t> ShuffledRows(std::mt19937& rng, int64_t length, int64_t stride) {
  std::vector<int64_t> order(length);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t& o : order) o = o * stride + 1;
  return order;
}

struct Case {
  int64_t heads, qk_dim, v_dim, length;
  bool shared;  // one key/value head for all heads (absorbed MLA: values are the keys' prefix)
  bool sinks;
};

TEST_P(RowsInPlace, AttentionOverBf16RowsEqualsF32Rows) {
  LATENT_REQUIRE_TABLE(table);
  ThreadCount restore;
  threads::SetNumThreads(2);
  std::mt19937 rng(41);
  const std::vector<Case> cases = {
      {16, 576, 512, 1, true, false},  {16, 576, 512, 65, true, false},
      {16, 576, 512, 1500, true, true}, {3, 17, 15, 513, true, false},
      {17, 33, 31, 2000, true, false}, {16, 192, 128, 70, false, false},
      {5, 17, 15, 1300, false, true},  {4, 16, 16, 0, true, false},
  };
  for (const Case& c : cases) {
    const std::string what = GetParam().name + std::string(" H=") + std::to_string(c.heads) +
                             " qk=" + std::to_string(c.qk_dim) + " L=" + std::to_string(c.length) +
                             (c.shared ? " shared" : " per-head");
    const int64_t key_stride = c.shared ? c.qk_dim : c.heads * c.qk_dim;
    const int64_t value_stride = c.shared ? c.qk_dim : c.heads * (c.v_dim + 3);
    const std::vector<float> q = RandomFloats(rng, c.heads * c.qk_dim, -2.0f, 2.0f);
    const std::vector<float> sinks = RandomFloats(rng, c.heads, -1.0f, 3.0f);
    const Store keys = MakeStore(rng, c.length * key_stride + 1, -2.0f, 2.0f);
    const Store values = c.shared ? Store{} : MakeStore(rng, c.length * value_stride + 1, -1.0f, 1.0f);
    const std::vector<int64_t> order = ShuffledRows(rng, c.length, key_stride);
    const RowPtrs k = PointInto(keys, order);
    const RowPtrs v = c.shared ? k : PointInto(values, ShuffledRows(rng, c.length, value_stride));
    std::vector<float> scratch(std::max<int64_t>(c.length, 1));
    std::vector<float> want(c.heads * c.v_dim, NAN), got(c.heads * c.v_dim, -NAN);
    AttentionArgs a;
    a.q = q.data();
    a.num_heads = c.heads;
    a.qk_dim = c.qk_dim;
    a.key_head_stride = c.shared ? 0 : c.qk_dim;
    a.value_head_stride = c.shared ? 0 : c.v_dim + 3;
    a.v_dim = c.v_dim;
    a.length = c.length;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.qk_dim));
    a.sinks = c.sinks ? sinks.data() : nullptr;
    a.scratch = scratch.data();
    a.rows = DType::kF32;
    a.keys = k.f32.data();
    a.values = v.f32.data();
    a.out = want.data();
    table.attention(a);
    a.rows = DType::kBF16;
    a.keys = k.bf16.data();
    a.values = v.bf16.data();
    a.out = got.data();
    table.attention(a);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * got.size())) << what;
    // Not vacuous: the output is finite and not all zero.
    ASSERT_TRUE(c.length == 0 || std::any_of(got.begin(), got.end(), [](float x) { return x != 0; }))
        << what;
  }
}

TEST_P(RowsInPlace, QueriesAttentionOverBf16RowsEqualsF32Rows) {
  LATENT_REQUIRE_TABLE(table);
  ThreadCount restore;
  threads::SetNumThreads(2);
  std::mt19937 rng(43);
  struct QCase {
    int64_t heads, qk_dim, v_dim;
    bool shared;
    std::vector<int64_t> lengths;
  };
  const std::vector<QCase> cases = {
      {16, 192, 128, false, {1, 2, 64, 65, 130, 513, 700, 0}},
      {3, 33, 31, true, {7, 600, 1, 64, 2000}},
      {1, 1, 1, false, {3, 1, 2}},
  };
  for (const QCase& c : cases) {
    const int64_t positions = *std::max_element(c.lengths.begin(), c.lengths.end());
    const int64_t nq = static_cast<int64_t>(c.lengths.size());
    const int64_t key_stride = c.shared ? c.qk_dim : c.heads * c.qk_dim;
    const int64_t value_stride = c.shared ? c.v_dim : c.heads * (c.v_dim + 3);
    const std::vector<float> q = RandomFloats(rng, nq * c.heads * c.qk_dim, -2.0f, 2.0f);
    const Store keys = MakeStore(rng, positions * key_stride + 1, -2.0f, 2.0f);
    const Store values = MakeStore(rng, positions * value_stride + 1, -1.0f, 1.0f);
    const RowPtrs k = PointInto(keys, ShuffledRows(rng, positions, key_stride));
    const RowPtrs v = PointInto(values, ShuffledRows(rng, positions, value_stride));
    QueriesAttentionArgs qa;
    qa.shared.num_heads = c.heads;
    qa.shared.qk_dim = c.qk_dim;
    qa.shared.key_head_stride = c.shared ? 0 : c.qk_dim;
    qa.shared.value_head_stride = c.shared ? 0 : c.v_dim + 3;
    qa.shared.v_dim = c.v_dim;
    qa.shared.scale = 1.0f / std::sqrt(static_cast<float>(c.qk_dim));
    qa.num_queries = nq;
    qa.q = q.data();
    qa.lengths = c.lengths.data();
    std::vector<float> want(nq * c.heads * c.v_dim, NAN), got(want.size(), -NAN);
    qa.shared.rows = DType::kF32;
    qa.shared.keys = k.f32.data();
    qa.shared.values = v.f32.data();
    qa.out = want.data();
    table.attention_queries(qa);
    qa.shared.rows = DType::kBF16;
    qa.shared.keys = k.bf16.data();
    qa.shared.values = v.bf16.data();
    qa.out = got.data();
    table.attention_queries(qa);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * got.size()))
        << GetParam().name << " H=" << c.heads << " qk=" << c.qk_dim;
  }
}

TEST_P(RowsInPlace, IndexScoresOverBf16KeysEqualF32Keys) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(47);
  for (const int64_t heads : {64, 7, 17}) {
    for (const int64_t dim : {128, 5, 33}) {
      const int64_t n = 41;
      const std::vector<float> q = RandomFloats(rng, heads * dim, -1.0f, 1.0f);
      const std::vector<float> w = RandomFloats(rng, heads, -1.0f, 1.0f);
      const Store keys = MakeStore(rng, n * dim + 1, -1.0f, 1.0f);
      const RowPtrs k = PointInto(keys, ShuffledRows(rng, n, dim));
      IndexScoreArgs a;
      a.q = q.data();
      a.w = w.data();
      a.heads = heads;
      a.dim = dim;
      a.scale = 1.0f / std::sqrt(static_cast<float>(dim));
      a.n = n;
      std::vector<float> want(n, NAN), got(n, -NAN);
      a.rows = DType::kF32;
      a.keys = k.f32.data();
      a.scores = want.data();
      table.index_scores(a);
      a.rows = DType::kBF16;
      a.keys = k.bf16.data();
      a.scores = got.data();
      table.index_scores(a);
      const std::string what = GetParam().name + std::string(" heads=") + std::to_string(heads) +
                               " dim=" + std::to_string(dim);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * n)) << what;
      for (int64_t j0 : {1, 3, 40}) {  // runs starting mid-tile, and a single key
        std::vector<float> part(n - j0, NAN);
        a.keys = k.bf16.data() + j0;
        a.n = n - j0;
        a.scores = part.data();
        table.index_scores(a);
        ASSERT_EQ(0, std::memcmp(part.data(), want.data() + j0, sizeof(float) * part.size()))
            << what << " from key " << j0;
      }
    }
  }
}

}  // namespace
}  // namespace latent::kernels
