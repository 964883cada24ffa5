// The W8A8 linear (`--quantize w8a8`): the AVX512-VNNI, AMX-INT8 and AVX2 kernels against the
// scalar reference, bit for bit (integer dot products, one fixed float formula), over k and n
// tails, decode and batch shapes, row slices, ties and zero rows; and batch invariance: a row's
// output is the same alone, inside any batch and with any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/amx/amx_kernels.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/linear.h"
#include "kernels/quantize_row.h"
#include "threads/thread_pool.h"
#include "kernel_test_util.h"

namespace latent::kernels {
namespace {

using testing::RandomFloats;
using testing::ThreadCount;

// The fast W8A8 kernels: AVX512-VNNI (vpdpbusd) over its tables' packed copy (the AVX-512 table
// and the bf16 packed one, which chains to its packing) and, in the tests that do not pack, over
// the rows as stored; on the AMX table, TDPBUSD over the same copy from 3 rows on (vpdpbusd
// below); AVX2 (vpmaddubsw) over the rows as stored and over the AVX2 packed table's copy; each
// run where the CPU has it; all must equal the reference bit for bit.
const KernelTable* VnniKernels() { return Avx512HasW8A8Vnni() ? Avx512Kernels() : nullptr; }
const KernelTable* VnniBf16PackedKernels() {
  return Avx512HasW8A8Vnni() ? Bf16PackedKernels() : nullptr;
}
const KernelTable* VnniAmxKernels() { return Avx512HasW8A8Vnni() ? AmxKernels() : nullptr; }

class W8A8Kernels : public ::testing::TestWithParam<testing::FastTable> {
 protected:
  // The reference on this thread under the rounding rules every kernel runs under (denormals
  // flushed, as on the pool's threads): Activations' tiny row has a subnormal scale.
  void SetUp() override { threads::FlushDenormals(); }
};

INSTANTIATE_TEST_SUITE_P(
    Isa, W8A8Kernels,
    ::testing::Values(testing::FastTable{"vnni", VnniKernels, "no AVX512-VNNI on this CPU"},
                      // The default table on AVX512-BF16 CPUs: its bf16 packing keeps VNNI's.
                      testing::FastTable{"vnni_bf16_packed", VnniBf16PackedKernels,
                                         "no AVX512-VNNI and AVX512-BF16 on this CPU"},
                      // The default on AMX CPUs: its tile packing keeps VNNI's too, and from
                      // 3 rows on, with AMX-INT8, TDPBUSD reads it.
                      testing::FastTable{"vnni_amx", VnniAmxKernels, "no AMX (or AVX512-VNNI) on this CPU"},
                      testing::Avx512Table(),  // without VNNI: the AVX2 kernel, row-major
                      testing::Avx2Table(),
                      testing::FastTable{"avx2_packed", Avx2PackedKernels, "no AVX2 on this CPU"}),
    testing::FastTableName);

// An int8 weight [n, k] at an odd address, with unaligned f32 row scales and its row sums: the
// layout QuantizeInt8(..., row_sums = true) makes.
struct W8A8Weight {
  std::vector<uint8_t> bytes;        // misalign + n * k
  std::vector<uint8_t> scale_bytes;  // 3 + 4 * n
  std::vector<int32_t> sums;         // [n]
  WeightRef ref;
  std::unique_ptr<uint8_t[]> packed;  // the table's packed copy, where it packs W8A8 weights
};

// `table`'s packed copy of w (as the loader makes it), then the rows as stored overwritten: the
// loader releases their pages, so a kernel that reads the packed copy must not read them.
void PackFor(const KernelTable& table, W8A8Weight& w) {
  w.packed = PackForLinear(table, w.ref);
  if (&table == Avx2PackedKernels()) {
    EXPECT_NE(w.packed, nullptr) << "AVX2 packs W8A8 weights";
  }
  if (Avx512HasW8A8Vnni() && (&table == Avx512Kernels() || &table == Bf16PackedKernels() ||
                              &table == AmxKernels())) {
    EXPECT_NE(w.packed, nullptr) << "the AVX512-VNNI tables pack W8A8 weights";
  }
  if (w.packed != nullptr) {
    std::fill(w.bytes.begin(), w.bytes.end(), uint8_t{0x5a});
  }
}

W8A8Weight MakeW8A8(std::mt19937& rng, int64_t n, int64_t k, int64_t misalign) {
  W8A8Weight w;
  // -128 too: the quantizer never makes it, but the kernels' dot must not depend on that.
  std::uniform_int_distribution<int> value(-128, 127);
  std::uniform_real_distribution<float> scale(0.001f, 0.01f);
  w.bytes.assign(misalign, 0);
  for (int64_t i = 0; i < n * k; ++i) w.bytes.push_back(static_cast<uint8_t>(value(rng)));
  w.scale_bytes.assign(3, 0);
  for (int64_t r = 0; r < n; ++r) {
    const float s = scale(rng);
    uint8_t b[4];
    std::memcpy(b, &s, 4);
    w.scale_bytes.insert(w.scale_bytes.end(), b, b + 4);
  }
  const int8_t* q = reinterpret_cast<const int8_t*>(w.bytes.data() + misalign);
  for (int64_t r = 0; r < n; ++r) w.sums.push_back(SumRowInt8(q + r * k, k));
  w.ref.data = q;
  w.ref.dtype = DType::kI8;
  w.ref.n = n;
  w.ref.k = k;
  w.ref.scale = w.scale_bytes.data() + 3;
  w.ref.scale_dtype = DType::kF32;
  w.ref.block_n = 1;
  w.ref.block_k = k;
  w.ref.row_sums = w.sums.data();
  return w;
}

// Activations [m, k] with the cases the quantizer must agree on: random rows, an all-zero row
// (scale 0, output 0), a row of exact ties (max 127, so x / scale hits .5 exactly), an outlier.
std::vector<float> Activations(std::mt19937& rng, int64_t m, int64_t k) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = dist(rng);
  if (m > 1) std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);
  if (m > 2) {
    for (int64_t c = 0; c < k; ++c) x[2 * k + c] = static_cast<float>(c % 9) - 4.5f;
    x[2 * k] = 127.0f;
  }
  if (m > 3) x[3 * k + k / 2] = 300.0f;
  if (m > 4) x[4 * k + k / 3] = NAN;  // scale NaN: every output NaN
  if (m > 5) {  // -0 and values that quantize to 0 beside a normal maximum
    for (int64_t c = 0; c < k; ++c) x[5 * k + c] = c % 2 == 0 ? -0.0f : 1e-30f;
    x[5 * k + k - 1] = 1.0f;
  }
  if (m > 6) {  // all tiny: the scale is subnormal, flushed to 0 as everywhere in the pool
    for (int64_t c = 0; c < k; ++c) x[6 * k + c] = static_cast<float>(c % 5) * 1e-38f;
  }
  if (m > 7) x[7 * k] = INFINITY;  // scale inf: every output NaN
  return x;
}

std::string Shape(int64_t m, int64_t n, int64_t k) {
  return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
}

TEST(W8A8Reference, IsTheIntegerDotTimesBothScales) {
  // Scale 1 on both sides: y is the exact integer dot; ties round to even.
  const std::vector<float> x = {127.0f, 0.5f, 1.5f, 2.5f, -2.5f};  // xq = 127, 0, 2, 2, -2
  const std::vector<int8_t> q = {1, 5, 3, -1, 2};
  const float sw = 127.0f / 127.0f;
  W8A8Weight w;
  w.sums = {SumRowInt8(q.data(), 5)};
  w.ref.data = q.data();
  w.ref.dtype = DType::kI8;
  w.ref.n = 1;
  w.ref.k = 5;
  w.ref.scale = &sw;
  w.ref.block_n = 1;
  w.ref.block_k = 5;
  w.ref.row_sums = w.sums.data();
  float y = NAN;
  std::vector<float> scratch(5);
  RefKernels().linear(x.data(), 1, w.ref, &y, scratch.data());
  EXPECT_EQ(y, 127.0f + 0.0f + 6.0f - 2.0f - 4.0f);
  const std::vector<float> zeros(5, 0.0f);
  RefKernels().linear(zeros.data(), 1, w.ref, &y, scratch.data());
  EXPECT_EQ(y, 0.0f);
}

TEST_P(W8A8Kernels, MatchesRefBitExactly) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(11);
  // k = 4,200 (66 tiles of 64): batches through more than one k chunk of the VNNI packed kernel
  // (64 tiles, avx512/packed_blocks.h) and of AMX's (64 tiles, amx/tile_blocks.h), then a tail.
  for (int64_t k : {1, 15, 63, 64, 65, 130, 600, 2050, 4200}) {
    for (int64_t n : {1, 3, 4, 5, 7, 8, 9, 67}) {
      if (k > 4096 && n != 67) continue;  // one shape past a chunk keeps the reference's time down
      for (int64_t misalign : {0, 1, 3}) {
        if (misalign != 0 && (k != 65 || n != 9)) continue;
        std::mt19937 same = rng;  // the same weight twice: one as stored, one packed
        const W8A8Weight stored = MakeW8A8(same, n, k, misalign);
        W8A8Weight w = MakeW8A8(rng, n, k, misalign);
        PackFor(fast, w);
        for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 16, 17, 64, 130}) {
          if (k >= 600 && m == 130 && n > 9) continue;  // keep the reference's time down
          const std::vector<float> x = Activations(rng, m, k);
          std::vector<float> want(m * n), got(m * n, NAN), scratch(k);
          RefKernels().linear(x.data(), m, stored.ref, want.data(), scratch.data());
          fast.linear(x.data(), m, w.ref, got.data(), scratch.data());
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * m * n))
              << Shape(m, n, k) << " misalign=" << misalign;
          if (w.packed != nullptr) {  // and the table's kernel over the rows as stored
            std::fill(got.begin(), got.end(), NAN);
            fast.linear(x.data(), m, stored.ref, got.data(), scratch.data());
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * m * n))
                << Shape(m, n, k) << " misalign=" << misalign << " unpacked";
          }
          if (m > 1) {
            for (int64_t r = 0; r < n; ++r) ASSERT_EQ(got[n + r], 0.0f) << "zero row";
          }
          if (m > 4) {  // a NaN activation reaches every output of its row, as in bf16
            for (int64_t r = 0; r < n; ++r) ASSERT_TRUE(std::isnan(got[4 * n + r])) << "NaN row";
          }
        }
      }
    }
  }
}

TEST_P(W8A8Kernels, RowSlicesMatchTheFullMatrix) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(12);
  const int64_t n = 150, k = 333;
  std::mt19937 same = rng;
  const W8A8Weight stored = MakeW8A8(same, n, k, 1);
  W8A8Weight w = MakeW8A8(rng, n, k, 1);
  PackFor(fast, w);  // views of a packed copy start inside a block (row0 5, 64 + 5, ...)
  for (int64_t m : {1, 3, 7, 64}) {
    const std::vector<float> x = Activations(rng, m, k);
    std::vector<float> full(m * n);
    fast.linear(x.data(), m, w.ref, full.data(), nullptr);
    for (int64_t row0 : {0, 5, 64, 131}) {
      const auto view = [&](const WeightRef& all) {
        return all.Rows(row0 / 2, 100 - row0 / 3).Rows(row0 - row0 / 2, 17);
      };
      std::vector<float> part(m * 17), want(m * 17), scratch(k);
      fast.linear(x.data(), m, view(w.ref), part.data(), nullptr);
      RefKernels().linear(x.data(), m, view(stored.ref), want.data(), scratch.data());
      for (int64_t i = 0; i < m; ++i) {
        ASSERT_EQ(0, std::memcmp(&part[i * 17], &full[i * n + row0], sizeof(float) * 17))
            << "m=" << m << " row0=" << row0;
      }
      ASSERT_EQ(0, std::memcmp(part.data(), want.data(), sizeof(float) * m * 17));
    }
  }
}

// A copy packed from a view (the loader packs each tensor it loads, some of them views of a fused
// one): packed row 0 is the view's row 0, while its scales stay those of the whole matrix.
TEST_P(W8A8Kernels, PackedFromAViewReadsItsOwnRowsAndScales) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(14);
  const int64_t n = 300, k = 100;
  W8A8Weight w = MakeW8A8(rng, n, k, 1);
  WeightRef view = w.ref.Rows(70, 150);
  std::unique_ptr<uint8_t[]> packed = PackForLinear(fast, view);
  for (int64_t m : {1, 3, 9}) {
    const std::vector<float> x = Activations(rng, m, k);
    std::vector<float> want(m * 150), got(m * 150, NAN), scratch(k);
    RefKernels().linear(x.data(), m, w.ref.Rows(70, 150), want.data(), scratch.data());
    fast.linear(x.data(), m, view, got.data(), scratch.data());
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * m * 150)) << "m=" << m;
    const WeightRef sub = view.Rows(33, 50);  // and a view of it, mid-block
    std::vector<float> part(m * 50);
    fast.linear(x.data(), m, sub, part.data(), scratch.data());
    for (int64_t i = 0; i < m; ++i) {
      ASSERT_EQ(0, std::memcmp(&part[i * 50], &want[i * 150 + 33], sizeof(float) * 50))
          << "m=" << m;
    }
  }
}

// Every row bit-identical alone (decode shapes), in any sub-batch and with 1 or 2 threads.
TEST_P(W8A8Kernels, IsBatchAndThreadInvariant) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  std::mt19937 rng(13);
  const int64_t n = 301, k = 2050, m = 130;  // n and k tails, L2 blocks, thread chunks
  std::mt19937 same = rng;
  const W8A8Weight stored = MakeW8A8(same, n, k, 1);
  W8A8Weight w = MakeW8A8(rng, n, k, 1);
  PackFor(fast, w);
  const std::vector<float> x = Activations(rng, m, k);
  threads::SetNumThreads(2);
  std::vector<float> batch(m * n);
  fast.linear(x.data(), m, w.ref, batch.data(), nullptr);
  for (int threads : {1, 2}) {
    threads::SetNumThreads(threads);
    for (int64_t take : {1, 2, 3, 4, 5, 7, 16, 17, 64}) {
      for (int64_t start = 0; start + take <= m; start += 23) {
        std::vector<float> part(take * n);
        fast.linear(&x[start * k], take, w.ref, part.data(), nullptr);
        ASSERT_EQ(0, std::memcmp(part.data(), &batch[start * n], sizeof(float) * take * n))
            << "threads=" << threads << " m=" << take << " start=" << start;
      }
    }
  }
  std::vector<float> want(m * n), scratch(k);
  RefKernels().linear(x.data(), m, stored.ref, want.data(), scratch.data());
  ASSERT_EQ(0, std::memcmp(want.data(), batch.data(), sizeof(float) * m * n));
}

// The TDPBUSD kernel itself at every m, 1-2 included, which the AMX table keeps on vpdpbusd:
// the two kernels' outputs are the same bits, so the table's tests above cannot tell which one
// ran. Decode tiles of m rows (1-16); past 16 rows whole 16-row tiles, in pairs (17, 31) and
// then a lone tail tile (33), over two k chunks of 64 tiles (k 4,200: 66 tiles of 64), and in
// two row blocks (161: amx/tile_blocks.h's 128 rows there, then a pair and a lone tile); views
// inside a block.
TEST(W8A8Amx, TileKernelMatchesRefAtEveryShape) {
  if (!AmxHasW8A8()) GTEST_SKIP() << "no AMX-INT8 on this CPU";
  std::mt19937 rng(15);
  for (int64_t k : {64, 65, 4200}) {
    for (int64_t n : {9, 67}) {
      std::mt19937 same = rng;
      const W8A8Weight stored = MakeW8A8(same, n, k, 1);
      W8A8Weight w = MakeW8A8(rng, n, k, 1);
      PackFor(*AmxKernels(), w);
      ASSERT_NE(w.packed, nullptr);
      for (int64_t row0 : {0, 5}) {
        const int64_t rows = n - row0 - 2;
        for (int64_t m : {1, 2, 3, 4, 5, 15, 16, 17, 31, 33, 161}) {
          if (m > 33 && k < 4096) continue;  // 161: two row blocks (128 rows at 64 tiles)
          const std::vector<float> x = Activations(rng, m, k);
          std::vector<float> want(m * rows), got(m * rows, NAN), scratch(k);
          RefKernels().linear(x.data(), m, stored.ref.Rows(row0, rows), want.data(),
                              scratch.data());
          amx::LinearW8A8Amx(x.data(), m, w.ref.Rows(row0, rows), got.data());
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * m * rows))
              << Shape(m, rows, k) << " row0=" << row0;
        }
      }
    }
  }
}

// Each family's linear reads a W8A8 copy in its own layout only: AVX2's 4-row blocks and VNNI's
// (and AMX's) quad tiles are different bytes, and the rows as stored are gone once packed, so a
// copy reaching the other family's kernel must stop the call, not compute from garbage.
TEST(W8A8PackedLayout, EachFamilyRefusesTheOthersCopy) {
  if (VnniKernels() == nullptr || Avx2PackedKernels() == nullptr) {
    GTEST_SKIP() << "needs both AVX512-VNNI and AVX2 on this CPU";
  }
  std::mt19937 rng(15);
  const int64_t n = 20, k = 70;
  W8A8Weight avx2 = MakeW8A8(rng, n, k, 0), vnni = MakeW8A8(rng, n, k, 0);
  PackFor(*Avx2PackedKernels(), avx2);
  PackFor(*VnniKernels(), vnni);
  EXPECT_EQ(avx2.ref.packed_layout, PackedLayout::kW8A8Avx2Blocks);
  EXPECT_EQ(vnni.ref.packed_layout, PackedLayout::kW8A8QuadTiles);
  const std::vector<float> x = Activations(rng, 8, k);
  std::vector<float> y(8 * n), scratch(k);
  const auto refuses = [&](const KernelTable& table, const WeightRef& w, const char* reads) {
    for (int64_t m : {1, 8}) {  // decode and batch (AMX's rows from 3 on)
      SCOPED_TRACE(m);
      testing::ExpectErrorNaming(
          [&] { table.linear(x.data(), m, w, y.data(), scratch.data()); },
          std::string(reads) + " layout");
    }
  };
  refuses(*VnniKernels(), avx2.ref, "w8a8-quad-tiles");
  if (VnniAmxKernels() != nullptr) refuses(*VnniAmxKernels(), avx2.ref, "w8a8-quad-tiles");
  refuses(*Avx2PackedKernels(), vnni.ref, "w8a8-avx2-blocks");
  // The packed kernel itself, called directly: it reads packed copies only, so a weight with
  // none stops it too.
  const W8A8Weight stored = MakeW8A8(rng, n, k, 0);
  for (const WeightRef* w : {&std::as_const(avx2.ref), &stored.ref}) {
    EXPECT_THROW(avx512::LinearW8A8VnniPacked(x.data(), 8, *w, y.data()), Error);
  }
}

}  // namespace
}  // namespace latent::kernels
