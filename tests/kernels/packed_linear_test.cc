// The linears over tile-packed bf16 weights (kernels/tile_pack.h; bf16 compute over bf16 weights
// repacked at load): AMX (kernels/amx/linear_amx.cc, where the CPU has AMX-BF16), vdpbf16ps
// (kernels/avx512/linear_bf16_packed.cc, where it has AVX512_BF16) and AVX2 FMAs
// (kernels/avx2/linear_bf16_packed_avx2.cc, where it has AVX2), each against the scalar
// reference, over k and n tails, decode and batch shapes and Rows() views; and their batch
// invariance: a row's output is the same bits alone, inside any batch, at any position in its
// tile and with any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_table.h"
#include "kernels/linear.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"
#include "kernel_test_util.h"

namespace latent::kernels {
namespace {

using testing::RandomFloats;
using testing::RunEachRowAlone;
using testing::RunLinear;
using testing::Bf16DotAsked;
using testing::RefForced;
using testing::ThreadCount;

class PackedLinear : public ::testing::TestWithParam<testing::FastTable> {};

INSTANTIATE_TEST_SUITE_P(
    Isa, PackedLinear,
    ::testing::Values(
        testing::FastTable{"amx", AmxKernels,
                           "no AMX-BF16 + AMX-TILE (or no OS tile state) on this CPU"},
        testing::FastTable{"avx512_packed", Bf16PackedKernels, "no AVX512_BF16 on this CPU"},
        testing::FastTable{"avx2_packed", Avx2PackedKernels, "no AVX2 on this CPU"}),
    testing::FastTableName);

// A bf16 weight [n, k] for bf16 compute at an odd address (checkpoint tensors are unaligned),
// with its packed copy.
struct PackedWeight {
  std::vector<uint8_t> bytes;  // 2 + 2 * n * k
  std::unique_ptr<uint8_t[]> packed;
  WeightRef ref;
};

PackedWeight MakePackedWeight(const KernelTable& table, std::mt19937& rng, int64_t n, int64_t k) {
  PackedWeight w;
  w.bytes.assign(2 + 2 * n * k, 0);
  const std::vector<float> values = RandomFloats(rng, n * k);
  for (int64_t i = 0; i < n * k; ++i) {
    const uint16_t b = F32ToBF16(values[i]);
    std::memcpy(w.bytes.data() + 2 + 2 * i, &b, 2);
  }
  w.ref.data = w.bytes.data() + 2;
  w.ref.dtype = DType::kBF16;
  w.ref.n = n;
  w.ref.k = k;
  w.ref.bf16_activations = true;
  w.packed = PackForLinear(table, w.ref);
  EXPECT_EQ(w.ref.packed_layout, PackedLayout::kBf16Tiles) << "every packed table: the same tiles";
  return w;
}

// Within the summation bound of the reference (kernel_test_util.h).
void ExpectNearRef(const std::vector<float>& x, int64_t m, const WeightRef& w,
                   const std::vector<float>& y) {
  testing::ExpectWithinSummationBound(x, m, w, y, /*extra_roundings=*/0);
}

// Whether `table` packs bf16 weights under bf16 compute (the packed kernels do; the row-major
// AVX-512 table packs only W8A8 weights, on CPUs with VNNI).
bool PacksBf16Weights(const KernelTable& table) {
  WeightRef w{nullptr, DType::kBF16, 16, 32};
  w.bf16_activations = true;
  return table.packed_bytes != nullptr && table.packed_bytes(w) > 0;
}

// AMX is the default where the CPU has it (dispatch.cc's kAmxByDefault has the figures) unless
// LATENT_GEMM names another GEMM (avx512, onednn), LATENT_KERNELS=ref or LATENT_BF16_DOT=1; only
// then does the loader pack bf16 weights.
TEST(AmxDispatch, BestKernelsUseAmxByDefaultWhereTheCpuHasIt) {
  const char* gemm = std::getenv("LATENT_GEMM");
  const bool other_gemm = gemm != nullptr && *gemm != '\0' && std::string(gemm) != "amx";
  const bool overridden = RefForced() || Bf16DotAsked();
  if (AmxKernels() != nullptr && !other_gemm && !overridden) {
    EXPECT_EQ(&BestKernels(), AmxKernels());
    EXPECT_STREQ(BestKernelsName(), "avx512-amx");
    EXPECT_TRUE(PacksBf16Weights(BestKernels())) << "AMX packs bf16 weights at load";
  } else {
    EXPECT_NE(&BestKernels(), AmxKernels());
    EXPECT_EQ(std::string(BestKernelsName()).find("amx"), std::string::npos);
    if (std::string(BestKernelsName()).find("packed") == std::string::npos) {
      EXPECT_FALSE(PacksBf16Weights(BestKernels())) << "only the packed kernels pack bf16 weights";
    }
  }
}

// LATENT_GEMM=avx512-packed picks the vdpbf16ps kernel over packed weights where the CPU has
// AVX512_BF16 (on AMX CPUs too); LATENT_GEMM=avx512 keeps the row-major one. LATENT_GEMM=avx2
// and avx2-packed pick the AVX2 family on any CPU (so its path runs end to end on AVX-512 machines
// too): the row-major kernel and the packed default.
TEST(Bf16PackedDispatch, BestKernelsFollowLatentGemm) {
  const char* gemm = std::getenv("LATENT_GEMM");
  const bool overridden = RefForced() || Bf16DotAsked();
  if (overridden || gemm == nullptr) GTEST_SKIP() << "no LATENT_GEMM (or overridden)";
  if (std::string(gemm) == "avx512-packed" && Bf16PackedKernels() != nullptr) {
    EXPECT_EQ(&BestKernels(), Bf16PackedKernels());
    EXPECT_STREQ(BestKernelsName(), "avx512-packed");
    EXPECT_TRUE(PacksBf16Weights(BestKernels()));
  } else if (std::string(gemm) == "avx512" && Avx512Kernels() != nullptr) {
    EXPECT_EQ(&BestKernels(), Avx512Kernels());
    EXPECT_FALSE(PacksBf16Weights(BestKernels()));
  } else if (Avx2Kernels() != nullptr && (Avx512Kernels() == nullptr ||
                                          std::string(gemm) == "avx2" ||
                                          std::string(gemm) == "avx2-packed")) {
    // The AVX2 family: CPUs without AVX-512, and any CPU under LATENT_GEMM=avx2 or avx2-packed.
    // LATENT_GEMM=avx2 keeps the row-major kernel; any other value leaves the packed default.
    const bool packed = std::string(gemm) != "avx2";
    EXPECT_EQ(&BestKernels(), packed ? Avx2PackedKernels() : Avx2Kernels());
    EXPECT_STREQ(BestKernelsName(), packed ? "avx2-packed" : "avx2");
    EXPECT_EQ(PacksBf16Weights(BestKernels()), packed);
    EXPECT_STREQ(BestBf16ProductsName(), "f32 fma");
  }
}

// A packed copy carries its layout; a kernel reads a copy in its own layout only and refuses any
// other with an error naming both (a bug: the copy's bytes would pass for weights), and a view of
// rows keeps the layout.
TEST(PackedLayoutCheck, ReadsItsOwnLayoutAndRefusesAnother) {
  const uint8_t bytes[64] = {};
  WeightRef w;
  w.dtype = DType::kBF16;
  w.n = 40;
  w.k = 64;
  EXPECT_FALSE(w.ReadsPacked(PackedLayout::kBf16Tiles)) << "no packed copy";
  w.packed = bytes;
  w.packed_layout = PackedLayout::kBf16Tiles;
  EXPECT_TRUE(w.ReadsPacked(PackedLayout::kBf16Tiles));
  EXPECT_TRUE(w.Rows(17, 5).ReadsPacked(PackedLayout::kBf16Tiles));
  testing::ExpectErrorNaming(
      [&] { w.Rows(16, 20).ReadsPacked(PackedLayout::kFp8Tiles); },
      "fp8-tiles layout was given a [20, 64] BF16 weight packed as bf16-tiles");
}

TEST_P(PackedLinear, PacksBf16ComputeWeightsOnly) {
  LATENT_REQUIRE_TABLE(table);
  ASSERT_NE(table.packed_bytes, nullptr);
  WeightRef w;
  w.dtype = DType::kBF16;
  w.n = 17;
  w.k = 33;
  EXPECT_EQ(table.packed_bytes(w), 0) << "bf16 weights under f32 compute read as stored";
  w.bf16_activations = true;
  EXPECT_EQ(table.packed_bytes(w), 2 * 2 * 1024);  // 2 column blocks x 2 k blocks of 1 KiB
  w.dtype = DType::kF32;
  EXPECT_EQ(table.packed_bytes(w), 0);
  EXPECT_EQ(RefKernels().packed_bytes, nullptr);
}

TEST_P(PackedLinear, MatchesRefWithinSummationBound) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(1);
  const int64_t shapes[][2] = {{1, 1},   {16, 32}, {17, 33},  {37, 70},
                               {64, 256}, {100, 31}, {48, 1000}, {5, 65}};
  for (const auto& shape : shapes) {
    const PackedWeight w = MakePackedWeight(table, rng, shape[0], shape[1]);
    ASSERT_NE(w.ref.packed, nullptr);
    for (int64_t m : {1, 3, 16, 17, 33, 40}) {
      const std::vector<float> x = RandomFloats(rng, m * w.ref.k, -2.0f, 2.0f);
      ExpectNearRef(x, m, w.ref, RunLinear(table, x, m, w.ref));
    }
  }
}

TEST_P(PackedLinear, ReadsThePackedCopy) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(2);
  const PackedWeight w = MakePackedWeight(table, rng, 40, 96);
  const std::vector<float> x = RandomFloats(rng, 5 * w.ref.k);
  const std::vector<float> y = RunLinear(table, x, 5, w.ref);
  ExpectNearRef(x, 5, w.ref, y);
  std::vector<uint8_t> zeros(w.bytes.size(), 0);
  WeightRef moved = w.ref;
  moved.data = zeros.data();  // the rows as stored no longer matter
  EXPECT_EQ(RunLinear(table, x, 5, moved), y);
}

// A weight without a packed copy goes to the linear of the table the packed one was built on.
TEST_P(PackedLinear, UnpackedWeightsGoToTheBaseTablesKernel) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(3);
  PackedWeight w = MakePackedWeight(table, rng, 21, 45);
  w.ref.packed = nullptr;  // built outside the loader: the base table's kernel, as before
  const std::vector<float> x = RandomFloats(rng, 4 * w.ref.k);
  const KernelTable& base =
      &table == Avx2PackedKernels() ? *Avx2Kernels() : *Avx512Kernels();
  EXPECT_EQ(RunLinear(table, x, 4, w.ref), RunLinear(base, x, 4, w.ref));
}

// Row i of a call over rows [0, m) of one batch equals row i computed alone, bit for bit, for
// every m in 1..70 (so at every position of a 16-row tile, alone or in a pair of tiles, with
// zero-padded and full last tiles), over tails of n and k. k = 2,100 (66 tiles of 32) takes
// batches through more than one k chunk of the AVX-512 kernel (64 tiles, packed_blocks.h) and of
// AMX's (64 tiles, amx/tile_blocks.h).
TEST_P(PackedLinear, BatchInvariantBitExact) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(4);
  constexpr int64_t kRows = 70;
  for (const auto& shape :
       {std::pair<int64_t, int64_t>{37, 70}, {64, 256}, {130, 600}, {37, 2100}}) {
    const PackedWeight w = MakePackedWeight(table, rng, shape.first, shape.second);
    const int64_t n = w.ref.n, k = w.ref.k;
    const std::vector<float> x = RandomFloats(rng, kRows * k, -3.0f, 3.0f);
    const std::vector<float> alone = RunEachRowAlone(table, x, kRows, w.ref);
    for (int64_t m = 2; m <= kRows; ++m) {
      const std::vector<float> y = RunLinear(table, x, m, w.ref);
      for (int64_t i = 0; i < m; ++i) {
        ASSERT_EQ(std::memcmp(&y[i * n], &alone[i * n], n * sizeof(float)), 0)
            << "row " << i << " of m " << m << ", [" << n << ", " << k << "]";
      }
    }
    // The same row beside other rows: a batch of copies of row 0 and a batch of other values.
    std::vector<float> other = RandomFloats(rng, kRows * k, -100.0f, 100.0f);
    std::copy(x.begin(), x.begin() + k, other.begin() + 37 * k);
    const std::vector<float> y = RunLinear(table, other, kRows, w.ref);
    EXPECT_EQ(std::memcmp(&y[37 * n], &alone[0], n * sizeof(float)), 0);
  }
}

// Batches with long rows: the AVX2 kernel takes the rows in blocks of whole register tiles whose
// activations fit the last-level cache (10 tiles, 60 rows of 16,384 here), so 148 rows (23 tiles
// of 6, then 2 of 5) run as 60 + 60 + 28. Every row must still be the bits of the same row alone,
// on 1 and 2 threads.
TEST_P(PackedLinear, LongRowsInRowBlocksKeepEveryRowsBits) {
  LATENT_REQUIRE_TABLE(table);
  ThreadCount restore;
  std::mt19937 rng(6);
  // 3 row blocks of 64 rows (16k columns); 160 columns: 3 thread chunks of 64, so on 2 threads
  // several row blocks run on each thread.
  const PackedWeight w = MakePackedWeight(table, rng, 160, 16384);
  const int64_t n = w.ref.n, k = w.ref.k, m = 148;
  const std::vector<float> x = RandomFloats(rng, m * k, -3.0f, 3.0f);
  const std::vector<float> alone = RunEachRowAlone(table, x, m, w.ref);
  for (int t : {1, 2}) {
    threads::SetNumThreads(t);
    const std::vector<float> y = RunLinear(table, x, m, w.ref);
    for (int64_t i = 0; i < m; ++i) {
      ASSERT_EQ(std::memcmp(&y[i * n], &alone[i * n], n * sizeof(float)), 0)
          << "row " << i << ", " << t << " threads";
    }
  }
  ExpectNearRef(x, m, w.ref, RunLinear(table, x, m, w.ref));
}

// The kernels keep activation tiles in per-thread buffers that outlive a call: a call's tiles must
// be zero past its k whatever an earlier, wider call left there (here NaN, which zero weights
// would not cancel), so a batch computes every row as it would alone.
TEST_P(PackedLinear, ActivationTilesAreZeroPastKAfterAWiderCall) {
  LATENT_REQUIRE_TABLE(table);
  ThreadCount restore;
  std::mt19937 rng(8);
  const PackedWeight wide = MakePackedWeight(table, rng, 64, 256);
  const PackedWeight narrow = MakePackedWeight(table, rng, 64, 200);  // k tail: 200 = 6 x 32 + 8
  for (int64_t m : {1, 8, 40}) {  // decode, small batches' rows, large batches' row tiles
    for (int t : {1, 2}) {
      threads::SetNumThreads(t);
      const std::vector<float> nan(m * 256, std::nanf(""));
      RunLinear(table, nan, m, wide.ref);
      const std::vector<float> x = RandomFloats(rng, m * 200);
      const std::vector<float> y = RunLinear(table, x, m, narrow.ref);
      const std::vector<float> alone = RunEachRowAlone(table, x, m, narrow.ref);
      for (int64_t i = 0; i < m * 64; ++i) {
        ASSERT_FALSE(std::isnan(y[i])) << "m " << m << ", output " << i << ", " << t << " threads";
        ASSERT_EQ(y[i], alone[i]) << "m " << m << ", output " << i << ", " << t << " threads";
      }
    }
  }
}

TEST_P(PackedLinear, ThreadCountInvariantBitExact) {
  LATENT_REQUIRE_TABLE(table);
  ThreadCount restore;
  std::mt19937 rng(5);
  const PackedWeight w = MakePackedWeight(table, rng, 1000, 288);
  for (int64_t m : {1, 20, 64}) {
    const std::vector<float> x = RandomFloats(rng, m * w.ref.k);
    threads::SetNumThreads(1);
    const std::vector<float> one = RunLinear(table, x, m, w.ref);
    ExpectNearRef(x, m, w.ref, one);
    for (int t : {2, 3, 5}) {
      threads::SetNumThreads(t);
      EXPECT_EQ(RunLinear(table, x, m, w.ref), one) << t << " threads, m " << m;
    }
  }
}

// Rows() views of a packed weight (MLA's per-head slices of kv_b, any row, mid-block too) read
// the same packed copy: their outputs are the matching columns of the full call, bit for bit.
TEST_P(PackedLinear, RowsViewsMatchTheFullCall) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(6);
  const PackedWeight w = MakePackedWeight(table, rng, 100, 70);
  for (int64_t m : {1, 19, 40}) {
    const std::vector<float> x = RandomFloats(rng, m * w.ref.k);
    const std::vector<float> full = RunLinear(table, x, m, w.ref);
    const int64_t views[][2] = {{0, 100}, {5, 17}, {16, 16}, {33, 60}, {99, 1}, {7, 2}};
    for (const auto& v : views) {
      const WeightRef sub = w.ref.Rows(v[0], v[1]);
      EXPECT_EQ(sub.packed, w.ref.packed);
      EXPECT_EQ(sub.packed_row0, v[0]);
      const std::vector<float> y = RunLinear(table, x, m, sub);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t c = 0; c < v[1]; ++c) {
          ASSERT_EQ(y[i * v[1] + c], full[i * 100 + v[0] + c])
              << "view [" << v[0] << ", +" << v[1] << ") m " << m << " row " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace latent::kernels
