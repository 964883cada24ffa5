// Cache rows read in place: every attention and index-score kernel (the reference, AVX-512,
// AVX2) over bf16 rows, and over rows in the fp8 encoding (cache/fp8_rows.h), must give, bit for
// bit, what it gives over the same rows converted to f32 (what the engine fed it before it read
// the paged rows in place, and still feeds it for a row the kernels do not read:
// kernels/row_format.h; for fp8 rows, the gather's own decoding, cache::DecodeFp8Row). Shapes with
// tails, unaligned rows (odd element or byte offsets), rows in shuffled storage order, several
// segments, per-head and shared heads, sinks. About 1 s in all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cache/fp8_rows.h"
#include "kernels/amx/amx_kernels.h"
#include "kernels/attention.h"
#include "kernels/index_scores.h"
#include "kernels/kernel_table.h"
#include "kernels/row_format.h"
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

// Scores of the keys from j0 on (runs starting mid-tile, and a single key), each equal bit for bit
// to the whole run's `want` from j0: `a` as for the whole run, `keys` its key pointers.
void ExpectRunsFromMidTileMatch(const KernelTable& table, IndexScoreArgs a,
                                const void* const* keys, const std::vector<float>& want,
                                const std::string& what) {
  const int64_t n = static_cast<int64_t>(want.size());
  for (int64_t j0 : {1, 3, 40}) {
    std::vector<float> part(n - j0, NAN);
    a.keys = keys + j0;
    a.n = n - j0;
    a.scores = part.data();
    table.index_scores(a);
    ASSERT_EQ(0, std::memcmp(part.data(), want.data() + j0, sizeof(float) * part.size()))
        << what << " from key " << j0;
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
      ExpectRunsFromMidTileMatch(table, a, k.bf16.data(), want, what);
    }
  }
}

// ---- fp8 rows ----

// `length` rows of `values` values, the first `fp8_values` in the fp8 encoding, stored in
// shuffled order at an odd byte offset (unaligned), and the same rows decoded to f32 by the
// gather's decoding (cache::DecodeFp8Row): what the kernels must read them as.
struct Fp8Store {
  RowFormat format;
  std::vector<uint8_t> bytes;
  std::vector<float> f32;
  std::vector<const void*> fp8_rows, f32_rows;  // [length] -> row t in either copy
};

// The values of one row: groups of very different magnitudes (so the scales differ), a zero group
// now and then (scale 0), tiny values (subnormal codes).
std::vector<float> Fp8RowValues(std::mt19937& rng, int64_t values, int64_t fp8_values) {
  std::vector<float> v = RandomFloats(rng, values, -1.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 7);
  for (int64_t g = 0; g < fp8_values; g += cache::kFp8Group) {
    const int kind = pick(rng);
    const float magnitude = kind == 0 ? 0.0f : kind == 1 ? 1e-3f : kind == 2 ? 40.0f : 1.5f;
    for (int64_t c = g; c < std::min(fp8_values, g + cache::kFp8Group); ++c) v[c] *= magnitude;
  }
  if (fp8_values > 3) v[3] = 1e-7f;  // far below the group's amax / 448 * 2^-9: code 0
  return v;
}

Fp8Store MakeFp8Store(std::mt19937& rng, int64_t length, int64_t values, int64_t fp8_values) {
  Fp8Store s;
  s.format = RowFormat::Fp8(fp8_values, cache::kFp8Group, cache::Fp8ScalesAt(fp8_values),
                            cache::Fp8TailAt(fp8_values));
  const int64_t row_bytes = static_cast<int64_t>(cache::Fp8RowBytes(values, fp8_values));
  s.bytes.assign(length * row_bytes + 1, 0);
  s.f32.assign(std::max<int64_t>(length, 1) * values, 0.0f);
  std::vector<int64_t> order(length);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t t = 0; t < length; ++t) {
    uint8_t* row = s.bytes.data() + 1 + order[t] * row_bytes;
    cache::EncodeFp8Row(Fp8RowValues(rng, values, fp8_values).data(), values, fp8_values, row);
    cache::DecodeFp8Row(row, values, fp8_values, &s.f32[t * values]);
    s.fp8_rows.push_back(row);
    s.f32_rows.push_back(&s.f32[t * values]);
  }
  return s;
}

// MLA's absorbed form over fp8-style rows: one shared head, the value the key's first v_dim
// values; q [heads, qk], scratch [length] (rows, keys and out are the caller's).
AttentionArgs SharedHeadArgs(const std::vector<float>& q, int64_t heads, int64_t qk, int64_t v_dim,
                             int64_t length, float scale, std::vector<float>& scratch) {
  AttentionArgs a;
  a.q = q.data();
  a.num_heads = heads;
  a.qk_dim = qk;
  a.v_dim = v_dim;
  a.length = length;
  a.scale = scale;
  a.scratch = scratch.data();
  return a;
}

TEST(RowsInPlaceFormat, Fp8RowsAreReadInPlaceWhenChunksDoNotStraddle) {
  const auto fp8 = [](int64_t values) {
    return RowFormat::Fp8(values, cache::kFp8Group, cache::Fp8ScalesAt(values),
                          cache::Fp8TailAt(values));
  };
  EXPECT_TRUE(RowsReadInPlace(DType::kF32));
  EXPECT_TRUE(RowsReadInPlace(DType::kBF16));
  EXPECT_FALSE(RowsReadInPlace(DType::kF16));
  EXPECT_TRUE(RowsReadInPlace(fp8(512)));
  EXPECT_TRUE(RowsReadInPlace(fp8(128)));
  EXPECT_TRUE(RowsReadInPlace(fp8(32)));
  EXPECT_FALSE(RowsReadInPlace(fp8(40)));  // a chunk would straddle the codes' end
  EXPECT_FALSE(RowsReadInPlace(RowFormat::Fp8(512, 96, 512, 528)));  // a group not a power of two
  EXPECT_FALSE(RowsReadInPlace(RowFormat::Fp8(512, 8, 512, 768)));   // groups inside a chunk
  EXPECT_FALSE(RowsReadInPlace(DType::kF8E4M3));                     // no layout
}

TEST_P(RowsInPlace, AttentionOverFp8RowsEqualsDecodedRows) {
  LATENT_REQUIRE_TABLE(table);
  ThreadCount restore;
  threads::SetNumThreads(2);
  std::mt19937 rng(53);
  struct Fp8Case {
    int64_t heads, fp8_values, rope, length;
    bool sinks;
  };
  const std::vector<Fp8Case> cases = {
      {16, 512, 64, 1, false}, {16, 512, 64, 65, false}, {16, 512, 64, 1500, true},
      {3, 32, 8, 513, false},  {17, 128, 0, 2000, false}, {5, 48, 5, 700, true},
      {4, 32, 8, 0, false},
  };
  for (const Fp8Case& c : cases) {
    const int64_t qk = c.fp8_values + c.rope;
    const std::string what = GetParam().name + std::string(" H=") + std::to_string(c.heads) +
                             " fp8=" + std::to_string(c.fp8_values) + " rope=" +
                             std::to_string(c.rope) + " L=" + std::to_string(c.length);
    const std::vector<float> q = RandomFloats(rng, c.heads * qk, -2.0f, 2.0f);
    const std::vector<float> sinks = RandomFloats(rng, c.heads, -1.0f, 3.0f);
    const Fp8Store rows = MakeFp8Store(rng, c.length, qk, c.fp8_values);
    ASSERT_TRUE(RowsReadInPlace(rows.format)) << what;
    std::vector<float> scratch(std::max<int64_t>(c.length, 1));
    std::vector<float> want(c.heads * c.fp8_values, NAN), got(want.size(), -NAN);
    AttentionArgs a = SharedHeadArgs(q, c.heads, qk, c.fp8_values, c.length,
                                     1.0f / std::sqrt(static_cast<float>(qk)), scratch);
    a.sinks = c.sinks ? sinks.data() : nullptr;
    a.rows = DType::kF32;
    a.keys = a.values = rows.f32_rows.data();
    a.out = want.data();
    table.attention(a);
    a.rows = rows.format;
    a.keys = a.values = rows.fp8_rows.data();
    a.out = got.data();
    table.attention(a);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * got.size())) << what;
    ASSERT_TRUE(c.length == 0 ||
                std::any_of(got.begin(), got.end(), [](float x) { return x != 0; }))
        << what;
    ASSERT_TRUE(std::all_of(got.begin(), got.end(), [](float x) { return std::isfinite(x); }))
        << what;
  }
}

TEST_P(RowsInPlace, AttentionOverFp8RowsKeepsNaN) {
  // A NaN code decodes to NaN, as the gather's does (not to a finite value): rows that held a
  // NaN stay non-finite in place too.
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(59);
  const int64_t heads = 8, fp8_values = 128, rope = 16, qk = fp8_values + rope, length = 40;
  Fp8Store rows = MakeFp8Store(rng, length, qk, fp8_values);
  uint8_t* row = const_cast<uint8_t*>(static_cast<const uint8_t*>(rows.fp8_rows[17]));
  row[5] = 0xff;  // -NaN
  float* decoded = const_cast<float*>(static_cast<const float*>(rows.f32_rows[17]));
  cache::DecodeFp8Row(row, qk, fp8_values, decoded);
  const std::vector<float> q = RandomFloats(rng, heads * qk, -2.0f, 2.0f);
  std::vector<float> scratch(length), want(heads * fp8_values), got(want.size());
  AttentionArgs a = SharedHeadArgs(q, heads, qk, fp8_values, length, 0.1f, scratch);
  a.keys = a.values = rows.f32_rows.data();
  a.out = want.data();
  table.attention(a);
  a.rows = rows.format;
  a.keys = a.values = rows.fp8_rows.data();
  a.out = got.data();
  table.attention(a);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isnan(want[i])) << i;
    ASSERT_TRUE(std::isnan(got[i])) << GetParam().name << " " << i;
  }
}

TEST_P(RowsInPlace, QueriesAttentionOverFp8RowsEqualsDecodedRows) {
  LATENT_REQUIRE_TABLE(table);
  ThreadCount restore;
  threads::SetNumThreads(2);
  std::mt19937 rng(61);
  const int64_t heads = 5, fp8_values = 64, rope = 8, qk = fp8_values + rope;
  const std::vector<int64_t> lengths = {7, 600, 1, 64, 130};
  const int64_t positions = 600, nq = static_cast<int64_t>(lengths.size());
  const Fp8Store rows = MakeFp8Store(rng, positions, qk, fp8_values);
  const std::vector<float> q = RandomFloats(rng, nq * heads * qk, -2.0f, 2.0f);
  QueriesAttentionArgs qa;
  qa.shared.num_heads = heads;
  qa.shared.qk_dim = qk;
  qa.shared.v_dim = fp8_values;
  qa.shared.scale = 1.0f / std::sqrt(static_cast<float>(qk));
  qa.num_queries = nq;
  qa.q = q.data();
  qa.lengths = lengths.data();
  std::vector<float> want(nq * heads * fp8_values, NAN), got(want.size(), -NAN);
  qa.shared.keys = qa.shared.values = rows.f32_rows.data();
  qa.out = want.data();
  table.attention_queries(qa);
  qa.shared.rows = rows.format;
  qa.shared.keys = qa.shared.values = rows.fp8_rows.data();
  qa.out = got.data();
  table.attention_queries(qa);
  ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * got.size())) << GetParam().name;
}

TEST_P(RowsInPlace, IndexScoresOverFp8KeysEqualDecodedKeys) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(67);
  struct KeyCase {
    int64_t heads, dim, fp8_values;  // DSA's index keys: every value fp8
  };
  for (const KeyCase& k : {KeyCase{64, 128, 128}, KeyCase{7, 32, 32}, KeyCase{17, 256, 256},
                           KeyCase{9, 133, 128}}) {
    const int64_t n = 41;
    const std::vector<float> q = RandomFloats(rng, k.heads * k.dim, -1.0f, 1.0f);
    const std::vector<float> w = RandomFloats(rng, k.heads, -1.0f, 1.0f);
    const Fp8Store keys = MakeFp8Store(rng, n, k.dim, k.fp8_values);
    IndexScoreArgs a;
    a.q = q.data();
    a.w = w.data();
    a.heads = k.heads;
    a.dim = k.dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(k.dim));
    a.n = n;
    std::vector<float> want(n, NAN), got(n, -NAN);
    a.keys = keys.f32_rows.data();
    a.scores = want.data();
    table.index_scores(a);
    a.rows = keys.format;
    a.keys = keys.fp8_rows.data();
    a.scores = got.data();
    table.index_scores(a);
    const std::string what = GetParam().name + std::string(" heads=") + std::to_string(k.heads) +
                             " dim=" + std::to_string(k.dim);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * n)) << what;
    ASSERT_TRUE(std::any_of(got.begin(), got.end(), [](float x) { return x != 0; })) << what;
    ExpectRunsFromMidTileMatch(table, a, keys.fp8_rows.data(), want, what);
  }
}

// The same rows as bf16 rows of the decoded values rounded to bf16 (nearest even), stored in
// order: what the AMX attention reads fp8 rows as under bf16 products.
struct RoundedRows {
  std::vector<uint16_t> bf16;
  std::vector<const void*> rows;
  RoundedRows(const Fp8Store& s, int64_t values) : bf16(s.f32.size()) {
    for (size_t i = 0; i < s.f32.size(); ++i) bf16[i] = F32ToBF16(s.f32[i]);
    for (size_t t = 0; t < s.f32_rows.size(); ++t) rows.push_back(&bf16[t * values]);
  }
};

// The AMX table's attention under bf16 products over fp8 rows with one shared head (MLA's
// absorbed decode, `--cache-dtype fp8`): on TDPBF16PS, each block's rows decoded and rounded to
// bf16 once, so bit for bit the AMX kernel over bf16 rows of the decoded values rounded to bf16
// (which kernels_test.cc's AmxAttention tests bound against the reference), on 1 and 2 threads.
// V3's dims over one segment and several, 2 head groups with a padded last, key dims short of a
// whole tile and ending in a part of a 16-value chunk (the rotary tail read masked), no rotary
// tail, values that are rows of their own (of one tile and a half); every other case with sinks.
// A NaN code, and a NaN in a key's rotary tail alone, reach the output as NaN; formats the
// kernels do not read in place stay off tiles.
TEST(RowsInPlaceAmx, DecodeOverFp8RowsIsDecodeOverTheirBf16Rounding) {
  if (AmxKernels() == nullptr) GTEST_SKIP() << "no AMX-BF16 (or no OS tile state) here";
  const KernelTable& amx = *AmxKernels();
  ThreadCount restore;
  std::mt19937 rng(67);
  struct Fp8Case {
    int64_t heads, fp8_values, rope, length;
    bool own_values;  // the values are other rows (v_dim = fp8_values), not the keys' prefix
  };
  const std::vector<Fp8Case> cases = {
      {16, 512, 64, 1, false},  {16, 512, 64, 65, false},  {16, 512, 64, 700, false},
      {16, 512, 64, 3000, false}, {20, 128, 32, 300, false}, {3, 32, 16, 65, false},
      {4, 64, 0, 130, false},   {9, 512, 64, 200, true},    {3, 32, 8, 65, false},
      {5, 48, 5, 700, false},   {4, 48, 8, 130, true},
  };
  int index = 0;
  for (const Fp8Case& c : cases) {
    const int64_t qk = c.fp8_values + c.rope;
    const std::string what = "H=" + std::to_string(c.heads) + " fp8=" +
                             std::to_string(c.fp8_values) + " rope=" + std::to_string(c.rope) +
                             " L=" + std::to_string(c.length) + (c.own_values ? " values" : "");
    const std::vector<float> q = RandomFloats(rng, c.heads * qk, -2.0f, 2.0f);
    const std::vector<float> sinks = RandomFloats(rng, c.heads, -1.0f, 3.0f);
    const Fp8Store keys = MakeFp8Store(rng, c.length, qk, c.fp8_values);
    const Fp8Store values = MakeFp8Store(rng, c.length, c.fp8_values, c.fp8_values);
    const RoundedRows rounded_keys(keys, qk), rounded_values(values, c.fp8_values);
    std::vector<float> scratch(std::max<int64_t>(c.length, 1));
    AttentionArgs a = SharedHeadArgs(q, c.heads, qk, c.fp8_values, c.length,
                                     1.0f / std::sqrt(static_cast<float>(qk)), scratch);
    a.sinks = index++ % 2 == 1 ? sinks.data() : nullptr;
    a.bf16_products = true;
    a.rows = DType::kBF16;
    a.keys = rounded_keys.rows.data();
    a.values = c.own_values ? rounded_values.rows.data() : a.keys;
    std::vector<float> want(c.heads * c.fp8_values, NAN);
    a.out = want.data();
    threads::SetNumThreads(2);
    amx.attention(a);
    a.rows = keys.format;
    a.keys = keys.fp8_rows.data();
    a.values = c.own_values ? values.fp8_rows.data() : a.keys;
    ASSERT_TRUE(amx::AmxTakesAttention(a)) << what;
    for (const int threads : {1, 2}) {
      threads::SetNumThreads(threads);
      std::vector<float> got(want.size(), -NAN);
      a.out = got.data();
      amx.attention(a);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * got.size()))
          << what << " threads " << threads;
      ASSERT_TRUE(c.length == 0 ||
                  std::any_of(got.begin(), got.end(), [](float x) { return x != 0; }))
          << what;
    }
  }

  // A NaN code (-NaN, 0xff) in one row: every output is NaN, as over the gather's f32 rows.
  const int64_t heads = 16, fp8_values = 128, qk = fp8_values + 16, length = 90;
  Fp8Store rows = MakeFp8Store(rng, length, qk, fp8_values);
  const_cast<uint8_t*>(static_cast<const uint8_t*>(rows.fp8_rows[70]))[9] = 0xff;
  const std::vector<float> q = RandomFloats(rng, heads * qk, -2.0f, 2.0f);
  std::vector<float> scratch(length), out(heads * fp8_values, 0.0f);
  AttentionArgs a = SharedHeadArgs(q, heads, qk, fp8_values, length, 0.1f, scratch);
  a.bf16_products = true;
  a.rows = rows.format;
  a.keys = a.values = rows.fp8_rows.data();
  a.out = out.data();
  ASSERT_TRUE(amx::AmxTakesAttention(a));
  amx.attention(a);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(std::isnan(out[i])) << i;
  // A NaN in one key's rotary tail (bf16, past the values): its score is NaN, so every output.
  rows = MakeFp8Store(rng, length, qk, fp8_values);
  auto* tail = const_cast<uint8_t*>(static_cast<const uint8_t*>(rows.fp8_rows[33])) +
               rows.format.tail_at + 2 * 3;
  const uint16_t nan_bits = 0x7fc1;
  std::memcpy(tail, &nan_bits, sizeof(nan_bits));
  a.keys = a.values = rows.fp8_rows.data();
  std::fill(out.begin(), out.end(), 0.0f);
  amx.attention(a);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(std::isnan(out[i])) << "tail " << i;
  // fp8 rows whose chunks would straddle a group or the codes' end are not read in place: the
  // caller converts them to f32 first, and the AMX kernel declines them.
  a.rows = RowFormat::Fp8(40, cache::kFp8Group, cache::Fp8ScalesAt(40), cache::Fp8TailAt(40));
  EXPECT_FALSE(amx::AmxTakesAttention(a));
  a.rows = rows.format;
  a.bf16_products = false;
  EXPECT_FALSE(amx::AmxTakesAttention(a));
}

}  // namespace
}  // namespace latent::kernels
