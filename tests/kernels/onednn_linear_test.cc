// The opt-in oneDNN GEMM (LATENT_GEMM=onednn): against the reference kernel over shapes with
// odd tails, its weight cache (reused, never confused), calls from inside ParallelFor, and the
// kernel table that sends only large bf16 linears to it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_table.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"
#include "kernel_test_util.h"
#if LATENT_HAVE_ONEDNN
#include "kernels/onednn/onednn_linear.h"
#endif

namespace latent::kernels {
namespace {

using testing::RandomFloats;
using testing::ThreadCount;

TEST(OnednnDispatch, BestKernelsUseOnednnOnlyWhenAskedFor) {
  const char* env = std::getenv("LATENT_GEMM");
  const bool asked = env != nullptr && std::string(env) == "onednn";
  if (asked && OnednnKernels() != nullptr) {
    EXPECT_EQ(&BestKernels(), OnednnKernels());
    EXPECT_NE(std::string(BestKernelsName()).find("+onednn"), std::string::npos);
  } else {
    EXPECT_NE(&BestKernels(), OnednnKernels());
    EXPECT_EQ(std::string(BestKernelsName()).find("onednn"), std::string::npos);
  }
}

#if LATENT_HAVE_ONEDNN

#define REQUIRE_ONEDNN() \
  if (OnednnKernels() == nullptr) GTEST_SKIP() << "no AVX-512, or LATENT_KERNELS=ref"

// A bf16 weight [n, k] at `misalign` bytes past an aligned buffer (mapped files give any address).
struct Bf16Weight {
  std::vector<uint8_t> bytes;
  WeightRef ref;
};

Bf16Weight MakeBf16Weight(std::mt19937& rng, int64_t n, int64_t k, int64_t misalign) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Bf16Weight w;
  w.bytes.assign(misalign + 2 * n * k, 0);
  for (int64_t i = 0; i < n * k; ++i) {
    const uint16_t h = F32ToBF16(dist(rng));
    std::memcpy(&w.bytes[misalign + 2 * i], &h, 2);
  }
  w.ref.data = w.bytes.data() + misalign;
  w.ref.dtype = DType::kBF16;
  w.ref.n = n;
  w.ref.k = k;
  return w;
}

// y = x . W^T by the reference kernel, on x as given.
std::vector<float> RefLinear(const std::vector<float>& x, int64_t m, const WeightRef& w) {
  std::vector<float> y(m * w.n), scratch(w.k);
  RefKernels().linear(x.data(), m, w, y.data(), scratch.data());
  return y;
}

// oneDNN's output against the reference on the same bf16-rounded activations (the products are
// exact in f32, so only the summation order differs: 1e-5 of sum |x w|, as for the other fast
// kernels), and against the f32 reference on the unrounded ones (each activation moves by at
// most 2^-9 of itself when rounded to bf16: 2^-8 of sum |x w| covers that and the f32 sums).
void ExpectMatchesRef(const std::vector<float>& x, int64_t m, const WeightRef& w,
                      const std::vector<float>& got, const std::string& what) {
  std::vector<float> rounded(x.size());
  for (size_t i = 0; i < x.size(); ++i) rounded[i] = RoundToBF16(x[i]);
  const std::vector<float> want_rounded = RefLinear(rounded, m, w);
  const std::vector<float> want_f32 = RefLinear(x, m, w);
  std::vector<float> row(w.k);
  for (int64_t r = 0; r < w.n; ++r) {
    RefKernels().dequant_row(w, r, row.data());
    for (int64_t i = 0; i < m; ++i) {
      double abs_dot = 0.0;
      for (int64_t c = 0; c < w.k; ++c) abs_dot += std::fabs(double{x[i * w.k + c]} * row[c]);
      const float g = got[i * w.n + r];
      ASSERT_NEAR(g, want_rounded[i * w.n + r], 1e-5 * abs_dot + 1e-30)
          << what << " at (" << i << ", " << r << ")";
      ASSERT_NEAR(g, want_f32[i * w.n + r], std::ldexp(abs_dot, -8) + 1e-30)
          << what << " at (" << i << ", " << r << ")";
    }
  }
}

TEST(OnednnLinear, MatchesRefWithinBf16Rounding) {
  REQUIRE_ONEDNN();
  ThreadCount restore;
  std::mt19937 rng(11);
  for (int threads : {1, 2}) {
    threads::SetNumThreads(threads);
    for (int64_t k : {17, 129, 1001}) {
      for (int64_t n : {7, 67, 129}) {  // 129 at 2 threads: slices of 128 and 1
        const Bf16Weight w = MakeBf16Weight(rng, n, k, n == 67 ? 1 : 0);
        for (int64_t m : {32, 33, 100, 257, 1100}) {  // 1100: row chunks of 512, 512, 76
          const std::vector<float> x = RandomFloats(rng, m * k);
          std::vector<float> got(m * n, NAN);
          ASSERT_TRUE(onednn::Linear(x.data(), m, w.ref, got.data()));
          ExpectMatchesRef(x, m, w.ref, got,
                           "threads=" + std::to_string(threads) + " m=" + std::to_string(m) +
                               " n=" + std::to_string(n) + " k=" + std::to_string(k));
        }
      }
    }
  }
}

// The second call reuses the packed weight and the primitive (same bits, nothing new cached); a
// different weight of the same shape, at another address or rewritten at the same one, is
// packed anew, not mistaken for the first.
TEST(OnednnLinear, WeightCacheReusedAndNotConfused) {
  REQUIRE_ONEDNN();
  std::mt19937 rng(12);
  const int64_t m = 40, n = 131, k = 77;
  Bf16Weight a = MakeBf16Weight(rng, n, k, 0);
  const Bf16Weight b = MakeBf16Weight(rng, n, k, 0);
  const std::vector<float> x = RandomFloats(rng, m * k);
  std::vector<float> first(m * n), second(m * n), other(m * n), rewritten(m * n);

  ASSERT_TRUE(onednn::Linear(x.data(), m, a.ref, first.data()));
  const onednn::CacheCounts after_first = onednn::CachedEntries();
  ASSERT_TRUE(onednn::Linear(x.data(), m, a.ref, second.data()));
  const onednn::CacheCounts after_second = onednn::CachedEntries();
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), sizeof(float) * first.size()));
  EXPECT_EQ(after_second.weights, after_first.weights);
  EXPECT_EQ(after_second.matmuls, after_first.matmuls);

  ASSERT_TRUE(onednn::Linear(x.data(), m, b.ref, other.data()));
  EXPECT_GT(onednn::CachedEntries().weights, after_second.weights);
  EXPECT_EQ(onednn::CachedEntries().matmuls, after_second.matmuls);  // same shape
  ExpectMatchesRef(x, m, b.ref, other, "second weight");

  a.bytes = b.bytes;  // same size: the same address now holds b's values
  ASSERT_EQ(a.ref.data, static_cast<const void*>(a.bytes.data()));
  ASSERT_TRUE(onednn::Linear(x.data(), m, a.ref, rewritten.data()));
  EXPECT_EQ(0, std::memcmp(rewritten.data(), other.data(), sizeof(float) * other.size()));
}

// Per-head projections call Linear from inside a ParallelFor: the slices then run inline on each
// calling thread, concurrently with the other heads', and give what a call from outside gives.
TEST(OnednnLinear, CallsFromInsideParallelFor) {
  REQUIRE_ONEDNN();
  ThreadCount restore;
  threads::SetNumThreads(2);
  std::mt19937 rng(13);
  const int64_t heads = 6, rows = 40, m = 48, k = 96;
  const Bf16Weight w = MakeBf16Weight(rng, heads * rows, k, 0);
  const std::vector<float> x = RandomFloats(rng, m * k);
  std::vector<std::vector<float>> inside(heads, std::vector<float>(m * rows));
  threads::ParallelFor(heads, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      EXPECT_TRUE(onednn::Linear(x.data(), m, w.ref.Rows(h * rows, rows), inside[h].data()));
    }
  });
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<float> outside(m * rows);
    ASSERT_TRUE(onednn::Linear(x.data(), m, w.ref.Rows(h * rows, rows), outside.data()));
    EXPECT_EQ(0, std::memcmp(inside[h].data(), outside.data(), sizeof(float) * outside.size()))
        << "head " << h;
  }
}

// The table sends bf16 weights with m >= MinRows() to oneDNN and everything else, bit for bit, to
// the kernels it wraps.
TEST(OnednnLinear, TableSendsOnlyLargeBf16LinearsToOnednn) {
  REQUIRE_ONEDNN();
  const KernelTable& own =
      testing::Bf16DotAsked() && Bf16DotKernels() ? *Bf16DotKernels() : *Avx512Kernels();
  const KernelTable& table = *OnednnKernels();
  std::mt19937 rng(14);
  const int64_t n = 70, k = 45, big = onednn::MinRows(), small = big - 1;
  const Bf16Weight w = MakeBf16Weight(rng, n, k, 0);
  const std::vector<float> x = RandomFloats(rng, big * k);
  std::vector<float> a(big * n), b(big * n), scratch(k);

  table.linear(x.data(), small, w.ref, a.data(), scratch.data());
  own.linear(x.data(), small, w.ref, b.data(), scratch.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * small * n)) << "m below MinRows";

  table.linear(x.data(), big, w.ref, a.data(), scratch.data());
  ASSERT_TRUE(onednn::Linear(x.data(), big, w.ref, b.data()));
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * big * n)) << "m at MinRows";

  std::vector<float> f32_bytes(n * k);
  for (float& v : f32_bytes) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  const WeightRef f32{f32_bytes.data(), DType::kF32, n, k};
  table.linear(x.data(), big, f32, a.data(), scratch.data());
  own.linear(x.data(), big, f32, b.data(), scratch.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * big * n)) << "f32 weights";
}

#endif  // LATENT_HAVE_ONEDNN

}  // namespace
}  // namespace latent::kernels
