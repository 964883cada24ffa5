// The linear over fp8 e4m3 weights with block scales under bf16 compute, on vdpbf16ps over the
// packed codes (kernels/avx512/linear_fp8_packed.cc; in the packed and the AMX tables, where the
// CPU has AVX512_BF16), on TDPBF16PS over them (kernels/amx/linear_fp8_amx.cc: the AMX table's
// weights whose scale blocks hold whole tiles of k) and on AVX2 FMAs over them
// (kernels/avx2/linear_fp8_packed_avx2.cc, in the AVX2 packed table): against the scalar reference (bf16(x) . (code x scale)) over every code,
// scale blocks of several shapes, n and k tails, decode and batch shapes and Rows() views; bit for
// bit batch and thread-count invariant; and the weights it does not take left to the table's
// unpacked fp8 linear.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/amx/amx_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/linear.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"
#include "kernel_test_util.h"

namespace latent::kernels {
namespace {

using testing::RandomFloats;
using testing::RunEachRowAlone;
using testing::RunLinear;
using testing::ThreadCount;

class Fp8PackedLinear : public ::testing::TestWithParam<testing::FastTable> {};

// The tables with the fp8 kernel: it also needs AVX512-VBMI (dispatch.cc).
const KernelTable* AmxWithFp8() { return CpuHasAvx512Bf16Vbmi() ? AmxKernels() : nullptr; }
const KernelTable* PackedWithFp8() {
  return CpuHasAvx512Bf16Vbmi() ? Bf16PackedKernels() : nullptr;
}

INSTANTIATE_TEST_SUITE_P(
    Isa, Fp8PackedLinear,
    ::testing::Values(
        testing::FastTable{"amx", AmxWithFp8,
                           "no AMX-BF16 + AMX-TILE + AVX512-VBMI (or no OS tile state) here"},
        testing::FastTable{"avx512_packed", PackedWithFp8,
                           "no AVX512_BF16 + AVX512-VBMI on this CPU"},
        testing::FastTable{"avx2_packed", Avx2PackedKernels, "no AVX2 on this CPU"}),
    testing::FastTableName);

// An fp8 weight [n, k] for bf16 compute at an odd address, with its block scales (f32 or bf16,
// [ceil(n / block_n), ceil(k / block_k)]) and its packed copy. Codes are drawn from all 254 finite
// values (subnormals and both zeros included).
struct Fp8Weight {
  std::vector<uint8_t> bytes;   // 1 + n * k
  std::vector<uint8_t> scales;  // 4 or 2 bytes each
  std::unique_ptr<uint8_t[]> packed;
  WeightRef ref;
};

Fp8Weight MakeFp8Weight(const KernelTable& table, std::mt19937& rng, int64_t n, int64_t k,
                        int64_t block_n, int64_t block_k, DType scale_dtype = DType::kF32) {
  Fp8Weight w;
  w.bytes.assign(1 + n * k, 0);
  std::uniform_int_distribution<int> code(0, 255);
  for (int64_t i = 0; i < n * k; ++i) {
    int c = code(rng);
    while ((c & 0x7f) == 0x7f) c = code(rng);  // NaN: not in these weights
    w.bytes[1 + i] = static_cast<uint8_t>(c);
  }
  const int64_t rows = (n + block_n - 1) / block_n, cols = (k + block_k - 1) / block_k;
  const std::vector<float> s = RandomFloats(rng, rows * cols, 1e-3f, 4e-3f);
  w.scales.assign(rows * cols * DTypeSize(scale_dtype), 0);
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (scale_dtype == DType::kBF16) {
      const uint16_t b = F32ToBF16(s[i]);
      std::memcpy(w.scales.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(w.scales.data() + 4 * i, &s[i], 4);
    }
  }
  w.ref.data = w.bytes.data() + 1;
  w.ref.dtype = DType::kF8E4M3;
  w.ref.n = n;
  w.ref.k = k;
  w.ref.scale = w.scales.data();
  w.ref.scale_dtype = scale_dtype;
  w.ref.block_n = block_n;
  w.ref.block_k = block_k;
  w.ref.bf16_activations = true;
  w.packed = PackForLinear(table, w.ref);
  return w;
}

// Within the summation bound of the reference (kernel_test_util.h), with one more rounding for
// each of the two scalings of a block scale (the reference scales each weight, the kernel each
// segment's sum).
void ExpectNearRef(const std::vector<float>& x, int64_t m, const WeightRef& w,
                   const std::vector<float>& y) {
  testing::ExpectWithinSummationBound(x, m, w, y, /*extra_roundings=*/2);
}

TEST_P(Fp8PackedLinear, PacksFp8ComputeWeightsWhoseBlocksHoldWholePairs) {
  LATENT_REQUIRE_TABLE(table);
  WeightRef w;
  w.dtype = DType::kF8E4M3;
  w.n = 17;
  w.k = 33;
  float scale = 1.0f;
  w.scale = &scale;
  w.block_n = 128;
  w.block_k = 128;
  EXPECT_EQ(table.packed_bytes(w), 0) << "fp8 weights under f32 compute read as stored";
  w.bf16_activations = true;
  // 2 blocks x 2 k tiles; the AVX2 layout: 2 blocks of a 32-byte header and 64 k x 16 codes.
  const int64_t bytes =
      &table == Avx2PackedKernels() ? 2 * (32 + 64 * kPackRows) : 2 * 2 * kPackFp8TileBytes;
  EXPECT_EQ(table.packed_bytes(w), bytes);
  w.block_k = 15;  // a scale block ending mid-pair
  EXPECT_EQ(table.packed_bytes(w), 0);
  w.block_k = 6;  // ... or after an odd number of pairs
  EXPECT_EQ(table.packed_bytes(w), 0);
  w.scale = nullptr;  // unscaled fp8
  EXPECT_EQ(table.packed_bytes(w), bytes);
}

TEST_P(Fp8PackedLinear, MatchesRefWithinSummationBound) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(11);
  struct Shape {
    int64_t n, k, block_n, block_k;
  };
  // DeepSeek's 128 x 128 blocks; the tiny test checkpoints' 16 x 16; blocks wider than a segment
  // (256); per-row scales over the whole k (block_n 1: every row its own scale); n and k tails.
  const Shape shapes[] = {{128, 256, 128, 128}, {200, 300, 128, 128}, {37, 70, 16, 16},
                          {64, 512, 16, 256},   {33, 129, 1, 132},    {16, 32, 16, 32},
                          {5, 7, 16, 16},       {70, 1000, 32, 64}};
  for (const Shape& s : shapes) {
    const Fp8Weight w = MakeFp8Weight(table, rng, s.n, s.k, s.block_n, s.block_k);
    ASSERT_NE(w.ref.packed, nullptr);
    for (int64_t m : {1, 3, 6, 7, 16, 33}) {
      const std::vector<float> x = RandomFloats(rng, m * w.ref.k, -2.0f, 2.0f);
      ExpectNearRef(x, m, w.ref, RunLinear(table, x, m, w.ref));
    }
  }
  // bf16 scales (some checkpoints store them so).
  const Fp8Weight w = MakeFp8Weight(table, rng, 48, 256, 16, 128, DType::kBF16);
  const std::vector<float> x = RandomFloats(rng, 9 * w.ref.k, -2.0f, 2.0f);
  ExpectNearRef(x, 9, w.ref, RunLinear(table, x, 9, w.ref));
}

// Every code widens to its exact value (subnormals, both zeros and NaN included): a one-hot
// activation picks one weight column, and with a power-of-two scale (an exact product) the output
// is code x scale, bit for bit.
TEST_P(Fp8PackedLinear, WidensEveryCodeExactly) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(12);
  constexpr int64_t kN = 256, kK = 64;
  Fp8Weight w = MakeFp8Weight(table, rng, kN, kK, 128, 128);
  for (int64_t r = 0; r < kN; ++r) w.bytes[1 + r * kK + 5] = static_cast<uint8_t>(r);
  const float scale = 0.25f;
  for (int i = 0; i < 2; ++i) std::memcpy(w.scales.data() + 4 * i, &scale, 4);
  w.packed = PackForLinear(table, w.ref);
  // Decode tiles (1, 3, 5 rows), a staged batch (8) and row tiles (30): each row the one-hot x.
  for (int64_t m : {1, 3, 5, 8, 30}) {
    std::vector<float> x(m * kK, 0.0f);
    for (int64_t i = 0; i < m; ++i) x[i * kK + 5] = 1.0f;
    const std::vector<float> y = RunLinear(table, x, m, w.ref);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t r = 0; r < kN; ++r) {
        const float expected = F8E4M3ToF32(static_cast<uint8_t>(r)) * scale;
        const float got = y[i * kN + r];
        if (std::isnan(expected)) {
          EXPECT_TRUE(std::isnan(got)) << "code " << r << ", m " << m;  // 0x7f, 0xff: NaN
        } else {
          EXPECT_EQ(got, expected) << "code " << r << ", m " << m << ", row " << i;
        }
      }
    }
  }
}

// A NaN code makes every output of its row NaN, as the reference's sum is, also where the
// activation at its column is zero (0 x NaN), on every path (decode tiles, staged, row tiles);
// the other rows keep the bits they have with that code at zero.
TEST_P(Fp8PackedLinear, ANanCodeMakesItsRowNanAndLeavesTheOthers) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(13);
  constexpr int64_t kN = 40, kK = 300;
  Fp8Weight clean = MakeFp8Weight(table, rng, kN, kK, 128, 128);
  Fp8Weight with_nan;
  with_nan.bytes = clean.bytes;
  with_nan.ref = clean.ref;
  with_nan.ref.data = with_nan.bytes.data() + 1;
  const int64_t nan_at[][2] = {{3, 250}, {20, 0}, {39, 299}};  // (row, column)
  for (const auto& [r, c] : nan_at) {
    clean.bytes[1 + r * kK + c] = 0;
    with_nan.bytes[1 + r * kK + c] = r % 2 == 0 ? 0xff : 0x7f;
  }
  clean.packed = PackForLinear(table, clean.ref);
  with_nan.packed = PackForLinear(table, with_nan.ref);
  for (int64_t m : {1, 4, 7, 30}) {
    std::vector<float> x = RandomFloats(rng, m * kK, -2.0f, 2.0f);
    for (int64_t i = 0; i < m; ++i) x[i * kK + 250] = 0.0f;
    // The whole matrix and views: mid-block ones, and one whose block holds a NaN row outside
    // the view (rows 21..39 of block 16..31, NaN row 20).
    for (const auto& [row, rows] : {std::pair<int64_t, int64_t>{0, kN}, {21, 19}, {4, 30}}) {
      const std::vector<float> want = RunLinear(table, x, m, clean.ref.Rows(row, rows));
      const std::vector<float> got = RunLinear(table, x, m, with_nan.ref.Rows(row, rows));
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t v = 0; v < rows; ++v) {
          const int64_t r = row + v;  // the matrix's row
          const float g = got[i * rows + v];
          if (r == 3 || r == 20 || r == 39) {
            EXPECT_TRUE(std::isnan(g)) << "row " << r << ", m " << m;
          } else {
            EXPECT_EQ(std::memcmp(&g, &want[i * rows + v], sizeof(g)), 0)
                << "row " << r << ", m " << m << ", view " << row << "+" << rows;
          }
        }
      }
    }
  }
}

TEST_P(Fp8PackedLinear, ReadsThePackedCopy) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(13);
  const Fp8Weight w = MakeFp8Weight(table, rng, 40, 96, 16, 32);
  const std::vector<float> x = RandomFloats(rng, 5 * w.ref.k);
  const std::vector<float> y = RunLinear(table, x, 5, w.ref);
  ExpectNearRef(x, 5, w.ref, y);
  std::vector<uint8_t> zeros(w.bytes.size(), 0);
  WeightRef moved = w.ref;
  moved.data = zeros.data();  // the codes as stored no longer matter; the scales still do
  EXPECT_EQ(RunLinear(table, x, 5, moved), y);
}

// The AVX-512 fp8 kernels (vdpbf16ps, and AMX's TDPBF16PS) read fp8 tiles, the AVX2 one its own
// blocks: each table tags its copy so, and each kernel refuses the other's copy with an error
// naming both.
TEST(Fp8PackedLayout, EachFamilyRefusesTheOthersCopy) {
  if (PackedWithFp8() == nullptr || Avx2PackedKernels() == nullptr) {
    GTEST_SKIP() << "needs AVX512_BF16 + AVX512-VBMI and AVX2 on this CPU";
  }
  std::mt19937 rng(16);
  const Fp8Weight tiles = MakeFp8Weight(*PackedWithFp8(), rng, 40, 256, 128, 128);
  const Fp8Weight blocks = MakeFp8Weight(*Avx2PackedKernels(), rng, 40, 256, 128, 128);
  EXPECT_EQ(tiles.ref.packed_layout, PackedLayout::kFp8Tiles);
  EXPECT_EQ(blocks.ref.packed_layout, PackedLayout::kFp8Avx2Blocks);
  const std::vector<float> x = RandomFloats(rng, 8 * 256);
  const auto refuses = [&](const KernelTable& table, const WeightRef& w, const char* reads) {
    testing::ExpectErrorNaming([&] { RunLinear(table, x, 8, w); }, std::string(reads) + " layout");
  };
  refuses(*PackedWithFp8(), blocks.ref, "fp8-tiles");
  refuses(*Avx2PackedKernels(), tiles.ref, "fp8-avx2-blocks");
}

// On the AMX table, fp8 weights whose scale blocks hold whole tiles of k (32) run TDPBF16PS over
// bf16 tiles widened from the codes (amx/linear_fp8_amx.cc); the others stay on the vdpbf16ps
// kernel, which the packed table runs. The two sum in different orders, so the table's tests above
// cannot tell which one ran: this checks the table's output against each kernel's own, and the AMX
// kernel called directly against the reference at decode and batch shapes, k tails and views.
TEST(Fp8Amx, TheTableSendsWeightsWithWholeTileBlocksToTdpbf16ps) {
  if (AmxWithFp8() == nullptr || PackedWithFp8() == nullptr) {
    GTEST_SKIP() << "no AMX-BF16 + AVX512-VBMI (or no OS tile state) here";
  }
  const KernelTable& table = *AmxWithFp8();
  std::mt19937 rng(18);
  struct Shape {
    int64_t n, k, block_n, block_k;
    bool amx;
  };
  for (const Shape& s : {Shape{200, 300, 128, 128, true}, Shape{40, 96, 16, 32, true},
                         Shape{37, 70, 16, 16, false}, Shape{33, 129, 1, 132, false}}) {
    SCOPED_TRACE(::testing::Message() << s.n << "x" << s.k << " blocks " << s.block_n << "x"
                                      << s.block_k);
    const Fp8Weight w = MakeFp8Weight(table, rng, s.n, s.k, s.block_n, s.block_k);
    ASSERT_NE(w.ref.packed, nullptr);
    EXPECT_EQ(amx::AmxTakesFp8(w.ref), s.amx);
    const Fp8Weight same = [&] {  // the same weight packed by the packed table
      Fp8Weight copy;
      copy.bytes = w.bytes;
      copy.scales = w.scales;
      copy.ref = w.ref;
      copy.ref.data = copy.bytes.data() + 1;
      copy.ref.scale = copy.scales.data();
      copy.ref.packed = nullptr;
      copy.packed = PackForLinear(*PackedWithFp8(), copy.ref);
      return copy;
    }();
    for (int64_t m : {1, 2, 5, 16, 17, 31, 33, 40}) {
      const std::vector<float> x = RandomFloats(rng, m * s.k, -2.0f, 2.0f);
      const std::vector<float> y = RunLinear(table, x, m, w.ref);
      if (s.amx) {
        std::vector<float> direct(m * s.n, NAN);
        amx::LinearFp8Amx(x.data(), m, w.ref, direct.data());
        ASSERT_EQ(0, std::memcmp(y.data(), direct.data(), sizeof(float) * m * s.n)) << "m " << m;
        ExpectNearRef(x, m, w.ref, direct);
        for (const auto& [row, rows] : {std::pair<int64_t, int64_t>{5, 17}, {16, s.n - 19}}) {
          std::vector<float> part(m * rows, NAN);
          amx::LinearFp8Amx(x.data(), m, w.ref.Rows(row, rows), part.data());
          for (int64_t i = 0; i < m; ++i) {
            ASSERT_EQ(0, std::memcmp(&part[i * rows], &direct[i * s.n + row], sizeof(float) * rows))
                << "m " << m << ", view " << row << "+" << rows;
          }
        }
      } else {
        EXPECT_EQ(y, RunLinear(*PackedWithFp8(), x, m, same.ref)) << "m " << m;
      }
    }
  }
}

TEST_P(Fp8PackedLinear, OtherFp8WeightsGoToTheUnpackedKernel) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(14);
  Fp8Weight w = MakeFp8Weight(table, rng, 21, 45, 16, 16);
  w.ref.packed = nullptr;  // built outside the loader
  const std::vector<float> x = RandomFloats(rng, 4 * w.ref.k);
  const KernelTable& base =
      &table == Avx2PackedKernels() ? *Avx2Kernels() : *Avx512Kernels();
  EXPECT_EQ(RunLinear(table, x, 4, w.ref), RunLinear(base, x, 4, w.ref));
  w.ref.bf16_activations = false;  // f32 compute (`--precision f32`): never packed
  EXPECT_EQ(PackForLinear(table, w.ref), nullptr);
  EXPECT_EQ(RunLinear(table, x, 4, w.ref), RunLinear(base, x, 4, w.ref));
}

// Row i of a call over rows [0, m) equals row i computed alone, bit for bit, for every m in
// 1..40 (every position of a 6-row register tile, decode and batch paths), on 1 and 2 threads.
TEST_P(Fp8PackedLinear, BatchAndThreadInvariantBitExact) {
  LATENT_REQUIRE_TABLE(table);
  ThreadCount restore;
  std::mt19937 rng(15);
  constexpr int64_t kRows = 40;
  struct Shape {
    int64_t n, k, block_n, block_k;
  };
  for (const Shape& s : {Shape{37, 70, 16, 16}, Shape{256, 384, 128, 128},
                         Shape{130, 600, 32, 256}}) {
    const Fp8Weight w = MakeFp8Weight(table, rng, s.n, s.k, s.block_n, s.block_k);
    const int64_t n = w.ref.n, k = w.ref.k;
    const std::vector<float> x = RandomFloats(rng, kRows * k, -3.0f, 3.0f);
    threads::SetNumThreads(1);
    const std::vector<float> alone = RunEachRowAlone(table, x, kRows, w.ref);
    for (int threads : {1, 2}) {
      threads::SetNumThreads(threads);
      for (int64_t m = 1; m <= kRows; ++m) {
        const std::vector<float> y = RunLinear(table, x, m, w.ref);
        for (int64_t i = 0; i < m * n; ++i) {
          ASSERT_EQ(y[i], alone[i]) << "m " << m << " threads " << threads << " element " << i
                                    << " of [" << n << ", " << k << "]";
        }
      }
    }
  }
}

// Batches with long rows: the AVX2 kernel takes the rows in blocks of whole register tiles whose
// activations fit the last-level cache (10 tiles, 60 rows of 16,384 here), so 148 rows (23 tiles
// of 6, then 2 of 5) run as 60 + 60 + 28. Every row must still be the bits of the same row alone,
// on 1 and 2 threads.
TEST_P(Fp8PackedLinear, LongRowsInRowBlocksKeepEveryRowsBits) {
  LATENT_REQUIRE_TABLE(table);
  ThreadCount restore;
  std::mt19937 rng(17);
  // 160 rows: several thread chunks, each running every row block on 2 threads.
  const Fp8Weight w = MakeFp8Weight(table, rng, 160, 16384, 128, 128);
  const int64_t n = w.ref.n, k = w.ref.k, m = 148;
  const std::vector<float> x = RandomFloats(rng, m * k, -3.0f, 3.0f);
  const std::vector<float> alone = RunEachRowAlone(table, x, m, w.ref);
  for (int threads : {1, 2}) {
    threads::SetNumThreads(threads);
    const std::vector<float> y = RunLinear(table, x, m, w.ref);
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_EQ(y[i], alone[i]) << "threads " << threads << " element " << i;
    }
  }
  ExpectNearRef(x, m, w.ref, RunLinear(table, x, m, w.ref));
}

// A view of rows (as the loader's splits and the MoE's slices take) computes its rows exactly as
// the whole matrix does: the same packed blocks, the scales of its own rows; also for a matrix
// packed from a view whose scale rows start mid-block.
TEST_P(Fp8PackedLinear, RowViewsMatchTheWholeMatrix) {
  LATENT_REQUIRE_TABLE(table);
  std::mt19937 rng(16);
  const Fp8Weight w = MakeFp8Weight(table, rng, 300, 256, 128, 128);
  // 1, 4, 6: decode tiles (with the one-block tiles at a view's end); 7: staged; 30: row tiles.
  for (int64_t m : {1, 4, 6, 7, 30}) {
    const std::vector<float> xm = RandomFloats(rng, m * w.ref.k);
    const std::vector<float> all = RunLinear(table, xm, m, w.ref);
    for (const auto& [row, rows] : {std::pair<int64_t, int64_t>{0, 300}, {5, 17}, {16, 64},
                                    {100, 200}, {127, 2}, {299, 1}}) {
      const std::vector<float> y = RunLinear(table, xm, m, w.ref.Rows(row, rows));
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(y[i * rows + r], all[i * 300 + row + r])
              << "m " << m << ", view " << row << "+" << rows;
        }
      }
    }
  }
  const std::vector<float> x = RandomFloats(rng, 7 * w.ref.k);
  const std::vector<float> whole = RunLinear(table, x, 7, w.ref);
  // Packed from a view: scale row 70 is packed row 0.
  WeightRef view = w.ref.Rows(70, 150);
  view.packed = nullptr;
  std::unique_ptr<uint8_t[]> packed = PackForLinear(table, view);
  ASSERT_NE(packed, nullptr);
  const std::vector<float> y = RunLinear(table, x, 7, view);
  ExpectNearRef(x, 7, view, y);
  for (int64_t i = 0; i < 7; ++i) {
    for (int64_t r = 0; r < 150; ++r) {
      // Other packed blocks, the same sums: a row's chain and scales do not depend on its lane.
      ASSERT_EQ(y[i * 150 + r], whole[i * 300 + 70 + r]) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace latent::kernels
