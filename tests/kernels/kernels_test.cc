// Every fast kernel against the reference kernels (the oracle), over shapes with odd tails,
// unaligned weights, partial fp8 blocks and int8 weights with per-row scales; plus the batch invariance the engine relies on: a
// row's result is bit-identical whatever m, the other rows and the thread count are.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/amx/amx_kernels.h"
#include "kernels/attention.h"
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/kernel_table.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"
#include "kernel_test_util.h"

namespace latent::kernels {
namespace {

using testing::Bf16DotAsked;
using testing::RandomFloats;
using testing::RefForced;
using testing::ThreadCount;

const KernelTable& Ref() { return RefKernels(); }

// Every FastKernels test runs once per fast kernel family (FastKernels/<test>/avx512 and
// .../avx2), and skips only on CPUs without that family.
class FastKernels : public ::testing::TestWithParam<testing::FastTable> {};

INSTANTIATE_TEST_SUITE_P(
    Isa, FastKernels,
    ::testing::Values(testing::Avx512Table(),
                      testing::Avx2Table()),
    testing::FastTableName);

// A weight matrix stored at a deliberately odd address, with its scales.
struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> scale_bytes;
  WeightRef ref;
};

// f32 -> f16 bits for test data in the normal f16 range (the mantissa is truncated).
uint16_t F32ToF16Bits(float v) {
  const uint32_t bits = F32ToBits(v);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((bits >> 23) & 0xffu) - 127 + 15;
  if (exp <= 0) return static_cast<uint16_t>(sign);  // tiny: zero
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | ((bits >> 13) & 0x3ffu));
}

void AppendScalar(std::vector<uint8_t>& out, DType dtype, float v) {
  switch (dtype) {
    case DType::kF32: {
      uint8_t b[4];
      std::memcpy(b, &v, 4);
      out.insert(out.end(), b, b + 4);
      break;
    }
    case DType::kBF16: {
      const uint16_t h = F32ToBF16(v);
      out.push_back(static_cast<uint8_t>(h));
      out.push_back(static_cast<uint8_t>(h >> 8));
      break;
    }
    case DType::kF16: {
      const uint16_t h = F32ToF16Bits(v);
      out.push_back(static_cast<uint8_t>(h));
      out.push_back(static_cast<uint8_t>(h >> 8));
      break;
    }
    default:
      FAIL() << "unsupported";
  }
}

// dtype f32/bf16/f16, fp8 e4m3 with [block_n, block_k] scales of `scale_dtype`, or int8 with
// one f32 scale per row (`--quantize int8`'s layout: block_n 1, block_k k; any block_n > 0).
// `bf16_activations`: the weight asks for bf16 compute (WeightRef::bf16_activations).
TestWeight MakeWeight(std::mt19937& rng, DType dtype, int64_t n, int64_t k, int64_t misalign,
                      int64_t block_n = 0, int64_t block_k = 0, DType scale_dtype = DType::kF32,
                      bool bf16_activations = false) {
  TestWeight w;
  w.ref.bf16_activations = bf16_activations;
  if (dtype == DType::kI8 && block_n > 0) {
    block_n = 1;
    block_k = k;
  }
  w.bytes.assign(misalign, 0);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t i = 0; i < n * k; ++i) {
    if (dtype == DType::kF8E4M3) {
      int b;
      do b = byte(rng);
      while ((b & 0x7f) == 0x7f);  // no NaN encodings
      w.bytes.push_back(static_cast<uint8_t>(b));
    } else if (dtype == DType::kI8) {
      w.bytes.push_back(static_cast<uint8_t>(byte(rng)));  // all of -128..127
    } else {
      AppendScalar(w.bytes, dtype, dist(rng));
    }
  }
  w.ref.dtype = dtype;
  w.ref.n = n;
  w.ref.k = k;
  if ((dtype == DType::kF8E4M3 || dtype == DType::kI8) && block_n > 0) {
    const int64_t rows = (n + block_n - 1) / block_n, cols = (k + block_k - 1) / block_k;
    w.scale_bytes.assign(3, 0);  // unaligned scales too
    std::uniform_real_distribution<float> sdist(0.001f, 0.01f);
    for (int64_t i = 0; i < rows * cols; ++i) {
      if (scale_dtype == DType::kF8E8M0) {
        w.scale_bytes.push_back(static_cast<uint8_t>(118 + byte(rng) % 6));  // 2^-9 .. 2^-4
      } else {
        AppendScalar(w.scale_bytes, scale_dtype, sdist(rng));
      }
    }
    w.ref.scale = w.scale_bytes.data() + 3;
    w.ref.scale_dtype = scale_dtype;
    w.ref.block_n = block_n;
    w.ref.block_k = block_k;
  }
  w.ref.data = w.bytes.data() + misalign;
  return w;
}

// Sum over c of |x[c] * W[r, c]| in double: the scale of the rounding error.
double AbsDot(const float* x, const std::vector<float>& row) {
  double s = 0.0;
  for (size_t c = 0; c < row.size(); ++c) s += std::fabs(static_cast<double>(x[c]) * row[c]);
  return s;
}

struct WeightCase {
  std::string name;
  DType dtype;
  int64_t block_n = 0, block_k = 0;
  DType scale_dtype = DType::kF32;
  bool bf16_activations = false;  // bf16 compute: inputs rounded to bf16 (int8 ignores it)
};

std::vector<WeightCase> WeightCases() {
  return {
      {"f32", DType::kF32},
      {"bf16", DType::kBF16},
      {"f16", DType::kF16},
      {"fp8_b16", DType::kF8E4M3, 16, 16},
      {"fp8_b128", DType::kF8E4M3, 128, 128},
      {"fp8_b16x128_bf16scale", DType::kF8E4M3, 16, 128, DType::kBF16},
      {"fp8_b128x16_e8m0", DType::kF8E4M3, 128, 16, DType::kF8E8M0},
      {"fp8_b7x24", DType::kF8E4M3, 7, 24},  // blocks that do not fit 16-wide chunks
      {"fp8_noscale", DType::kF8E4M3},
      {"i8_per_row", DType::kI8, 1},  // per-row f32 scales (block_k = k)
      // bf16 compute (`--precision bf16`): the same kernels over inputs rounded to bf16.
      {"bf16act_f32", DType::kF32, 0, 0, DType::kF32, true},
      {"bf16act_bf16", DType::kBF16, 0, 0, DType::kF32, true},
      {"bf16act_f16", DType::kF16, 0, 0, DType::kF32, true},
      {"bf16act_fp8_b128", DType::kF8E4M3, 128, 128, DType::kF32, true},
      {"bf16act_fp8_b7x24", DType::kF8E4M3, 7, 24, DType::kF32, true},
      {"bf16act_i8_per_row", DType::kI8, 1, 0, DType::kF32, true},  // ignored: int8's own
  };
}

TEST(KernelDispatch, BestKernelsIsAmxElsePackedElseAvx512ElseAvx2ElseRef) {
  if (std::getenv("LATENT_GEMM") != nullptr) GTEST_SKIP() << "LATENT_GEMM: see OnednnDispatch";
  const bool bf16_dot = Bf16DotAsked();
  if (RefForced()) {
    EXPECT_STREQ(BestKernelsName(), "ref");
  } else if (AmxKernels() != nullptr && !bf16_dot) {
    EXPECT_STREQ(BestKernelsName(), "avx512-amx");
    EXPECT_EQ(&BestKernels(), AmxKernels());
  } else if (Bf16PackedKernels() != nullptr && !bf16_dot) {
    EXPECT_STREQ(BestKernelsName(), "avx512-packed");
    EXPECT_EQ(&BestKernels(), Bf16PackedKernels());
  } else if (Avx512Kernels() != nullptr && (!bf16_dot || Bf16DotKernels() == nullptr)) {
    EXPECT_STREQ(BestKernelsName(), "avx512");
    EXPECT_EQ(&BestKernels(), Avx512Kernels());
  } else if (Avx512Kernels() != nullptr) {
    EXPECT_EQ(&BestKernels(), Bf16DotKernels());
  } else if (Avx2PackedKernels() != nullptr) {
    EXPECT_STREQ(BestKernelsName(), "avx2-packed");
    EXPECT_EQ(&BestKernels(), Avx2PackedKernels());
    EXPECT_NE(BestKernels().pack, nullptr) << "the AVX2 default packs bf16 weights at load";
  } else {
    EXPECT_STREQ(BestKernelsName(), "ref");
  }
}

TEST_P(FastKernels, DequantRowMatchesRefExactly) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(1);
  for (const WeightCase& wc : WeightCases()) {
    for (int64_t k : {1, 15, 16, 17, 33, 130, 257}) {
      const int64_t n = 19;
      const TestWeight w =
          MakeWeight(rng, wc.dtype, n, k, 1, wc.block_n, wc.block_k, wc.scale_dtype, wc.bf16_activations);
      std::vector<float> a(k + 1, -7.0f), b(k + 1, -7.0f);
      for (int64_t r : {int64_t{0}, int64_t{5}, n - 1}) {
        Ref().dequant_row(w.ref, r, a.data());
        fast.dequant_row(w.ref, r, b.data());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * (k + 1)))
            << wc.name << " k=" << k << " row=" << r;
      }
    }
  }
}

TEST_P(FastKernels, LinearMatchesRef) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(2);
  for (const WeightCase& wc : WeightCases()) {
    for (int64_t k : {1, 15, 16, 17, 33, 130, 600}) {
      for (int64_t n : {1, 7, 67}) {
        for (int64_t misalign : {0, 1, 3}) {
          if (misalign != 0 && (k != 33 || n != 7)) continue;
          const TestWeight w =
              MakeWeight(rng, wc.dtype, n, k, misalign, wc.block_n, wc.block_k, wc.scale_dtype, wc.bf16_activations);
          for (int64_t m : {1, 3, 4, 5, 17}) {
            const std::vector<float> x = RandomFloats(rng, m * k);
            std::vector<float> want(m * n), got(m * n, NAN), scratch(k);
            Ref().linear(x.data(), m, w.ref, want.data(), scratch.data());
            fast.linear(x.data(), m, w.ref, got.data(), scratch.data());
            std::vector<float> row(k);
            for (int64_t r = 0; r < n; ++r) {
              Ref().dequant_row(w.ref, r, row.data());
              for (int64_t i = 0; i < m; ++i) {
                const double tol = 1e-5 * AbsDot(&x[i * k], row) + 1e-30;
                ASSERT_NEAR(got[i * n + r], want[i * n + r], tol)
                    << wc.name << " m=" << m << " n=" << n << " k=" << k << " at (" << i << ", "
                    << r << ")";
              }
            }
          }
        }
      }
    }
  }
}

// A row's output is bit-identical alone (m = 1), inside any batch, at any position, with any
// thread count, and for row slices of the weight (WeightRef::Rows).
TEST_P(FastKernels, LinearIsBatchInvariant) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  std::mt19937 rng(3);
  for (const WeightCase& wc : WeightCases()) {
    const int64_t n = 300, k = 2050, m = 37;  // staged k-blocks, M tiles and thread chunks
    const TestWeight w = MakeWeight(rng, wc.dtype, n, k, 1, wc.block_n, wc.block_k, wc.scale_dtype, wc.bf16_activations);
    const std::vector<float> x = RandomFloats(rng, m * k);
    threads::SetNumThreads(2);
    std::vector<float> batch(m * n);
    fast.linear(x.data(), m, w.ref, batch.data(), nullptr);
    for (int threads : {1, 2}) {
      threads::SetNumThreads(threads);
      for (int64_t take : {1, 2, 4, 5, 9}) {
        for (int64_t start = 0; start + take <= m; start += 11) {
          std::vector<float> part(take * n);
          fast.linear(&x[start * k], take, w.ref, part.data(), nullptr);
          ASSERT_EQ(0, std::memcmp(part.data(), &batch[start * n], sizeof(float) * take * n))
              << wc.name << " threads=" << threads << " m=" << take << " start=" << start;
        }
      }
    }
    // Row slices, block-aligned or not (WeightRef::Rows), nested.
    for (int64_t row0 : {int64_t{0}, int64_t{5}, int64_t{128}, int64_t{131}}) {
      const WeightRef slice = w.ref.Rows(row0 / 2, 100 + row0 / 2).Rows(row0 - row0 / 2, 70);
      std::vector<float> sliced(3 * 70), sliced_ref(3 * 70), scratch(k);
      fast.linear(&x[5 * k], 3, slice, sliced.data(), nullptr);
      for (int64_t i = 0; i < 3; ++i) {
        ASSERT_EQ(0, std::memcmp(&sliced[i * 70], &batch[(5 + i) * n + row0], sizeof(float) * 70))
            << wc.name << " row0=" << row0;
      }
      std::vector<float> full_ref(3 * n);
      Ref().linear(&x[5 * k], 3, w.ref, full_ref.data(), scratch.data());
      Ref().linear(&x[5 * k], 3, slice, sliced_ref.data(), scratch.data());
      for (int64_t i = 0; i < 3; ++i) {
        ASSERT_EQ(0, std::memcmp(&sliced_ref[i * 70], &full_ref[i * n + row0], sizeof(float) * 70))
            << wc.name << " row0=" << row0;
      }
    }
  }
}

// Large batches: activation blocks sized by k and super-blocks of rows (8 MiB of activations)
// with a short last one (m = 13 after 208 rows at k = 10001); every row bit-identical to the
// row alone and close to the reference.
TEST_P(FastKernels, LinearLargeBatchMatchesRefAndIsBatchInvariant) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  std::mt19937 rng(4);
  for (const WeightCase& wc : WeightCases()) {
    if (wc.name != "f32" && wc.name != "bf16" && wc.name != "fp8_b128" &&
        wc.name != "fp8_b7x24" && wc.name != "bf16act_bf16" && wc.name != "bf16act_fp8_b128") {
      continue;
    }
    const int64_t n = 37, k = 10001, m = 221;
    const TestWeight w = MakeWeight(rng, wc.dtype, n, k, 1, wc.block_n, wc.block_k, wc.scale_dtype, wc.bf16_activations);
    const std::vector<float> x = RandomFloats(rng, m * k);
    for (int threads : {1, 2}) {
      threads::SetNumThreads(threads);
      std::vector<float> batch(m * n);
      fast.linear(x.data(), m, w.ref, batch.data(), nullptr);
      for (int64_t i = 0; i < m; i += (i < 200 ? 7 : 1)) {
        std::vector<float> alone(n);
        fast.linear(&x[i * k], 1, w.ref, alone.data(), nullptr);
        ASSERT_EQ(0, std::memcmp(alone.data(), &batch[i * n], sizeof(float) * n))
            << wc.name << " threads=" << threads << " row=" << i;
      }
      std::vector<float> want(3 * n), scratch(k), row(k);
      Ref().linear(&x[(m - 3) * k], 3, w.ref, want.data(), scratch.data());
      for (int64_t r = 0; r < n; ++r) {
        Ref().dequant_row(w.ref, r, row.data());
        for (int64_t i = 0; i < 3; ++i) {
          const double tol = 1e-5 * AbsDot(&x[(m - 3 + i) * k], row) + 1e-30;
          ASSERT_NEAR(batch[(m - 3 + i) * n + r], want[i * n + r], tol) << wc.name;
        }
      }
    }
  }
}

// Every batch size from 1 to 70 (decode tiles, every short last M-tile, several activation
// blocks) over k and n that are not multiples of 8 or 16, for every weight dtype: each batch's
// rows are bit-identical to the same rows of the 70-row batch (so to each row alone), whatever
// the thread count (1, 2 or 3), and close to the reference.
TEST_P(FastKernels, LinearEveryBatchSizeMatchesRefAndIsBatchInvariant) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  std::mt19937 rng(41);
  const int64_t most = 70;
  for (const WeightCase& wc : WeightCases()) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{11, 13}, {37, 77}, {5, 263}}) {
      const TestWeight w =
          MakeWeight(rng, wc.dtype, n, k, 1, wc.block_n, wc.block_k, wc.scale_dtype, wc.bf16_activations);
      const std::vector<float> x = RandomFloats(rng, most * k);
      std::vector<float> want(most * n), batch(most * n, NAN), scratch(k), row(k);
      Ref().linear(x.data(), most, w.ref, want.data(), scratch.data());
      threads::SetNumThreads(2);
      fast.linear(x.data(), most, w.ref, batch.data(), nullptr);
      for (int64_t r = 0; r < n; ++r) {
        Ref().dequant_row(w.ref, r, row.data());
        for (int64_t i = 0; i < most; ++i) {
          const double tol = 1e-5 * AbsDot(&x[i * k], row) + 1e-30;
          ASSERT_NEAR(batch[i * n + r], want[i * n + r], tol)
              << wc.name << " n=" << n << " k=" << k << " at (" << i << ", " << r << ")";
        }
      }
      for (int64_t m = 1; m < most; ++m) {
        threads::SetNumThreads(1 + static_cast<int>(m % 3));
        std::vector<float> part(m * n, NAN);
        fast.linear(x.data(), m, w.ref, part.data(), nullptr);
        ASSERT_EQ(0, std::memcmp(part.data(), batch.data(), sizeof(float) * m * n))
            << wc.name << " n=" << n << " k=" << k << " m=" << m
            << " threads=" << threads::NumThreads();
      }
    }
  }
}

// The opt-in bf16-activation linear (LATENT_BF16_DOT=1): the reference over activations rounded
// to bf16, and bit-identical rows alone, in any batch and with any thread count.
TEST(Bf16DotKernels, LinearMatchesRefOnRoundedActivationsAndIsBatchInvariant) {
  if (Bf16DotKernels() == nullptr) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  const KernelTable& dot = *Bf16DotKernels();
  ThreadCount restore;
  std::mt19937 rng(5);
  for (int64_t k : {1, 15, 31, 32, 33, 600, 2050}) {
    for (int64_t n : {1, 7, 67}) {
      const TestWeight w = MakeWeight(rng, DType::kBF16, n, k, n == 7 ? 1 : 0, 0, 0, DType::kF32);
      const int64_t m = 13;
      const std::vector<float> x = RandomFloats(rng, m * k);
      std::vector<float> rounded(x.size());
      for (size_t i = 0; i < x.size(); ++i) rounded[i] = RoundToBF16(x[i]);
      std::vector<float> want(m * n), batch(m * n, NAN), scratch(k), row(k);
      Ref().linear(rounded.data(), m, w.ref, want.data(), scratch.data());
      threads::SetNumThreads(2);
      dot.linear(x.data(), m, w.ref, batch.data(), scratch.data());
      for (int64_t r = 0; r < n; ++r) {
        Ref().dequant_row(w.ref, r, row.data());
        for (int64_t i = 0; i < m; ++i) {
          const double tol = 1e-5 * AbsDot(&rounded[i * k], row) + 1e-30;
          ASSERT_NEAR(batch[i * n + r], want[i * n + r], tol)
              << "m=" << m << " n=" << n << " k=" << k << " at (" << i << ", " << r << ")";
        }
      }
      for (int threads : {1, 2}) {
        threads::SetNumThreads(threads);
        for (int64_t take : {1, 2, 4, 5, 6, 7}) {
          for (int64_t start = 0; start + take <= m; start += 5) {
            std::vector<float> part(take * n);
            dot.linear(&x[start * k], take, w.ref, part.data(), scratch.data());
            ASSERT_EQ(0, std::memcmp(part.data(), &batch[start * n], sizeof(float) * take * n))
                << "k=" << k << " n=" << n << " threads=" << threads << " m=" << take
                << " start=" << start;
          }
        }
      }
    }
  }
  // Other weight dtypes go to the f32 kernel unchanged.
  const TestWeight w = MakeWeight(rng, DType::kF32, 9, 40, 0, 0, 0, DType::kF32);
  const std::vector<float> x = RandomFloats(rng, 3 * 40);
  std::vector<float> a(3 * 9), b(3 * 9), scratch(40);
  dot.linear(x.data(), 3, w.ref, a.data(), scratch.data());
  Avx512Kernels()->linear(x.data(), 3, w.ref, b.data(), scratch.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size()));
}

// bf16 compute (WeightRef::bf16_activations, `--precision bf16`): the reference rounds every
// input exactly as RoundToBF16 and is otherwise unchanged, bit for bit, in linear and
// transposed_linear; int8 weights ignore the flag (their own activations: f32, or int8 for w8a8).
TEST(RefKernels, Bf16ActivationsRoundTheInputsAndNothingElse) {
  std::mt19937 rng(61);
  for (const WeightCase& wc : WeightCases()) {
    if (wc.bf16_activations) continue;  // the plain cases, flagged below
    const int64_t n = 9, k = 70, m = 5;
    const TestWeight w = MakeWeight(rng, wc.dtype, n, k, 1, wc.block_n, wc.block_k, wc.scale_dtype);
    WeightRef flagged = w.ref;
    flagged.bf16_activations = true;
    const bool int8 = wc.dtype == DType::kI8;
    for (const bool transposed : {false, true}) {
      const int64_t in = transposed ? n : k, out = transposed ? k : n;
      const std::vector<float> x = RandomFloats(rng, m * in);
      std::vector<float> rounded(x.size());
      for (size_t i = 0; i < x.size(); ++i) rounded[i] = RoundToBF16(x[i]);
      std::vector<float> plain(m * out), on_rounded(m * out), got(m * out), scratch(k);
      const auto run = [&](const float* in_x, const WeightRef& ref, float* y) {
        if (transposed) {
          Ref().transposed_linear(in_x, m, ref, y);
        } else {
          Ref().linear(in_x, m, ref, y, scratch.data());
        }
      };
      run(x.data(), w.ref, plain.data());
      run(rounded.data(), w.ref, on_rounded.data());
      run(x.data(), flagged, got.data());
      EXPECT_EQ(0, std::memcmp(got.data(), (int8 ? plain : on_rounded).data(),
                               sizeof(float) * got.size()))
          << wc.name << (transposed ? " transposed" : "");
      if (!int8) {  // the rounding did something, so the comparison above means something
        EXPECT_NE(0, std::memcmp(got.data(), plain.data(), sizeof(float) * got.size())) << wc.name;
      }
    }
  }
}

// The same in every fast family: a flagged weight's linear and transposed_linear equal that
// family's kernel over inputs rounded by RoundToBF16, bit for bit (the rounding is exact and the
// summation order is the f32 one), at decode and batch shapes with two threads, so batch
// invariance carries over (the FastKernels tests above run the flagged cases too). On
// AVX512_BF16 CPUs the AVX-512 family runs flagged bf16 weights on vdpbf16ps (its own order):
// those are held to the reference within f32 summation error instead.
TEST_P(FastKernels, Bf16ActivationsEqualTheKernelOnRoundedInputs) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  threads::SetNumThreads(2);
  std::mt19937 rng(62);
  for (const WeightCase& wc : WeightCases()) {
    if (!wc.bf16_activations) continue;
    const bool dot = std::string(GetParam().name) == "avx512" && Avx512HasBf16Dot() &&
                     wc.dtype == DType::kBF16;
    for (const auto& [n, k, m] : {std::tuple<int64_t, int64_t, int64_t>{67, 600, 1},
                                  {37, 2050, 17},
                                  {130, 130, 70}}) {
      const TestWeight w = MakeWeight(rng, wc.dtype, n, k, 1, wc.block_n, wc.block_k,
                                      wc.scale_dtype, /*bf16_activations=*/true);
      WeightRef plain = w.ref;
      plain.bf16_activations = false;
      const std::vector<float> x = RandomFloats(rng, m * k), xt = RandomFloats(rng, m * n);
      std::vector<float> rounded(x.size()), rounded_t(xt.size());
      for (size_t i = 0; i < x.size(); ++i) rounded[i] = RoundToBF16(x[i]);
      for (size_t i = 0; i < xt.size(); ++i) rounded_t[i] = RoundToBF16(xt[i]);
      const bool int8 = wc.dtype == DType::kI8;
      std::vector<float> got(m * n, NAN), want(m * n, NAN), scratch(k);
      fast.linear(x.data(), m, w.ref, got.data(), scratch.data());
      if (!dot) {
        fast.linear((int8 ? x : rounded).data(), m, plain, want.data(), scratch.data());
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * got.size()))
            << wc.name << " n=" << n << " k=" << k << " m=" << m;
      } else {
        Ref().linear(x.data(), m, w.ref, want.data(), scratch.data());
        std::vector<float> row(k);
        for (int64_t r = 0; r < n; ++r) {
          Ref().dequant_row(w.ref, r, row.data());
          for (int64_t i = 0; i < m; ++i) {
            ASSERT_NEAR(got[i * n + r], want[i * n + r], 1e-5 * AbsDot(&rounded[i * k], row) + 1e-30)
                << wc.name << " (vdpbf16ps) n=" << n << " k=" << k << " m=" << m;
          }
        }
      }
      std::vector<float> got_t(m * k, NAN), want_t(m * k, NAN);
      fast.transposed_linear(xt.data(), m, w.ref, got_t.data());
      fast.transposed_linear((int8 ? xt : rounded_t).data(), m, plain, want_t.data());
      ASSERT_EQ(0, std::memcmp(got_t.data(), want_t.data(), sizeof(float) * got_t.size()))
          << wc.name << " transposed n=" << n << " k=" << k << " m=" << m;
    }
  }
}

// The AVX2 rounding of bf16 compute (also the AVX-512 family's) is RoundToBF16 bit for bit:
// ties to even, carries into the exponent, overflow to infinity, denormals, NaNs kept NaN.
TEST(Avx2Kernels, RoundActivationsToBf16IsRoundToBF16) {
  if (Avx2Kernels() == nullptr) GTEST_SKIP() << "no AVX2 + FMA + F16C on this CPU";
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x00000001u, 0x8000ffffu, 0x00018000u,
                                0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x3f7fffffu, 0x3fffffffu,
                                0x7f7fffffu, 0xff7f8000u, 0x7f7f7fffu, 0x7f800000u, 0xff800000u,
                                0x7f800001u, 0x7fc00000u, 0xff80ffffu, 0xffffffffu, 0x7fbf8000u};
  std::mt19937 rng(63);
  for (int i = 0; i < 4000; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  std::vector<float> x(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) x[i] = BitsToF32(bits[i]);
  for (const size_t count : {bits.size(), size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{21}}) {
    std::vector<float> got(count + 1, -7.0f);
    avx2::RoundActivationsToBf16(x.data(), static_cast<int64_t>(count), got.data());
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(F32ToBits(got[i]), F32ToBits(RoundToBF16(x[i])))
          << "input bits 0x" << std::hex << bits[i];
    }
    ASSERT_EQ(got[count], -7.0f) << "wrote past count";
  }
  std::vector<float> in_place = x;  // in place is allowed
  avx2::RoundActivationsToBf16(in_place.data(), static_cast<int64_t>(in_place.size()),
                               in_place.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(F32ToBits(in_place[i]), F32ToBits(RoundToBF16(x[i])));
}

TEST_P(FastKernels, TransposedLinearMatchesRefAndIsBatchInvariant) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(4);
  for (const WeightCase& wc : WeightCases()) {
    for (int64_t k : {1, 15, 17, 130, 512}) {
      for (int64_t n : {1, 7, 67, 128}) {
        const TestWeight w =
            MakeWeight(rng, wc.dtype, n, k, 3, wc.block_n, wc.block_k, wc.scale_dtype, wc.bf16_activations);
        for (int64_t m : {1, 3, 5}) {
          const std::vector<float> x = RandomFloats(rng, m * n);
          std::vector<float> want(m * k), got(m * k, NAN);
          Ref().transposed_linear(x.data(), m, w.ref, want.data());
          fast.transposed_linear(x.data(), m, w.ref, got.data());
          std::vector<std::vector<float>> rows(n, std::vector<float>(k));
          for (int64_t r = 0; r < n; ++r) Ref().dequant_row(w.ref, r, rows[r].data());
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t c = 0; c < k; ++c) {
              double abs_sum = 0.0;
              for (int64_t r = 0; r < n; ++r)
                abs_sum += std::fabs(double{x[i * n + r]} * rows[r][c]);
              ASSERT_NEAR(got[i * k + c], want[i * k + c], 1e-5 * abs_sum + 1e-30)
                  << wc.name << " m=" << m << " n=" << n << " k=" << k;
            }
            std::vector<float> alone(k);
            fast.transposed_linear(&x[i * n], 1, w.ref, alone.data());
            ASSERT_EQ(0, std::memcmp(alone.data(), &got[i * k], sizeof(float) * k)) << wc.name;
          }
          if (n > 3) {  // a row slice that starts mid-block matches the reference on it
            const WeightRef slice = w.ref.Rows(3, n - 3);
            std::vector<float> slice_want(m * k), slice_got(m * k);
            std::vector<float> xs(m * (n - 3));
            for (int64_t i = 0; i < m; ++i)
              std::copy(&x[i * n + 3], &x[(i + 1) * n], &xs[i * (n - 3)]);
            Ref().transposed_linear(xs.data(), m, slice, slice_want.data());
            fast.transposed_linear(xs.data(), m, slice, slice_got.data());
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t c = 0; c < k; ++c) {
                double abs_sum = 0.0;
                for (int64_t r = 3; r < n; ++r)
                  abs_sum += std::fabs(double{x[i * n + r]} * rows[r][c]);
                ASSERT_NEAR(slice_got[i * k + c], slice_want[i * k + c], 1e-5 * abs_sum + 1e-30)
                    << wc.name << " slice";
              }
            }
          }
        }
      }
    }
  }
}

template <typename F>
void ForNormWeights(std::mt19937& rng, int64_t d, F f) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<uint8_t> w(1), b(1);  // odd addresses
    std::uniform_real_distribution<float> dist(0.5f, 1.5f);
    for (int64_t c = 0; c < d; ++c) {
      AppendScalar(w, dtype, dist(rng));
      AppendScalar(b, dtype, dist(rng) - 1.0f);
    }
    f(dtype, w.data() + 1, b.data() + 1);
  }
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double rel,
                 double abs, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + abs) << what << " at " << i;
  }
}

TEST_P(FastKernels, RmsNormAndLayerNormMatchRef) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(5);
  for (int64_t d : {1, 15, 16, 17, 130, 2048}) {
    for (int64_t m : {1, 3}) {
      const std::vector<float> x = RandomFloats(rng, m * d, -3.0f, 3.0f);
      ForNormWeights(rng, d, [&](DType dtype, const void* w, const void* b) {
        const std::string what =
            "d=" + std::to_string(d) + " dtype=" + std::string(DTypeName(dtype));
        std::vector<float> want(m * d), got(m * d), inplace = x;
        Ref().rms_norm(x.data(), m, d, w, dtype, 1e-6f, want.data());
        fast.rms_norm(x.data(), m, d, w, dtype, 1e-6f, got.data());
        ExpectClose(got, want, 1e-6, 1e-7, "rms_norm " + what);
        fast.rms_norm(inplace.data(), m, d, w, dtype, 1e-6f, inplace.data());
        ASSERT_EQ(0, std::memcmp(inplace.data(), got.data(), sizeof(float) * m * d));

        Ref().layer_norm(x.data(), m, d, w, b, dtype, 1e-6f, want.data());
        fast.layer_norm(x.data(), m, d, w, b, dtype, 1e-6f, got.data());
        // LayerNorm's output is a difference: compare relative to |(x - mean) * inv * w| + |b|.
        for (int64_t i = 0; i < m * d; ++i) {
          ASSERT_NEAR(got[i], want[i], 2e-6 * (std::fabs(want[i]) + 3.0) + 1e-7)
              << "layer_norm " << what << " at " << i;
        }
      });
    }
  }
}

TEST_P(FastKernels, SiluMulMatchesRef) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(6);
  for (int64_t n : {1, 15, 17, 1408, 4099}) {
    std::vector<float> gate = RandomFloats(rng, n, -20.0f, 20.0f);
    if (n > 10) {  // extremes: exp overflow / underflow and exact zero
      gate[0] = 100.0f;
      gate[1] = -100.0f;
      gate[2] = 0.0f;
      gate[3] = -88.5f;
      gate[4] = 88.5f;
      gate[5] = -1e-30f;
    }
    const std::vector<float> up = RandomFloats(rng, n, -2.0f, 2.0f);
    std::vector<float> want(n), got(n);
    Ref().silu_mul(gate.data(), up.data(), n, want.data());
    fast.silu_mul(gate.data(), up.data(), n, got.data());
    ExpectClose(got, want, 1e-6, 1e-30, "silu_mul n=" + std::to_string(n));
  }
}

TEST_P(FastKernels, ExpWeightsMatchRefAndWeighMinusInfAtZero) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(16);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 7, 15, 16, 17, 1000, 102400}) {
    std::vector<float> x = RandomFloats(rng, n, -30.0f, 3.0f);
    for (int64_t i = 0; i < n; i += 5) x[i] = -inf;  // disallowed tokens
    if (n > 10) {
      x[n - 2] = 4.0f;   // the max (weight exactly 1), in the last block
      x[2] = -1000.0f;   // underflows at any temperature
    }
    for (int64_t block : {16, 1024}) {
      for (float scale : {1.0f, 1.0f / 0.7f, 10.0f}) {
        const int64_t blocks = (n + block - 1) / block;
        std::vector<float> want(n), got(n, -1.0f);
        std::vector<double> want_mass(blocks), got_mass(blocks, -1.0);
        const float want_max =
            Ref().exp_weights(x.data(), n, scale, block, want.data(), want_mass.data());
        const float got_max =
            fast.exp_weights(x.data(), n, scale, block, got.data(), got_mass.data());
        ASSERT_EQ(got_max, want_max);
        for (int64_t i = 0; i < n; ++i) {
          // A -inf logit weighs exactly 0: tolerance 0 there (the reference's weight is 0).
          const double tolerance = x[i] == -inf ? 0.0 : 4e-7 * want[i] + 1e-37;
          ASSERT_NEAR(got[i], want[i], tolerance)
              << "i=" << i << " x=" << x[i] << " scale=" << scale;
        }
        if (n > 10) {
          ASSERT_EQ(got[n - 2], 1.0f);
        }
        for (int64_t b = 0; b < blocks; ++b) {
          double sum = 0;
          for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) sum += got[i];
          ASSERT_NEAR(got_mass[b], sum, 1e-12 * sum) << "block " << b << ": its weights' sum";
          ASSERT_NEAR(got_mass[b], want_mass[b], 1e-6 * want_mass[b] + 1e-37) << "block " << b;
        }
        std::vector<float> again(n);
        std::vector<double> again_mass(blocks);
        fast.exp_weights(x.data(), n, scale, block, again.data(), again_mass.data());
        EXPECT_EQ(again_mass, got_mass) << "the same row gives the same sums";
      }
    }
  }
}

// The max is the largest number, as the reference's std::max gives it, with a NaN logit after the
// max in the same vector lane (8 or 16 lanes): a max instruction with the NaN as its second
// operand returned the NaN, and the next value in the lane then replaced the true max.
TEST_P(FastKernels, ExpWeightsMaxSkipsNan) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(17);
  for (int64_t n : {20, 40, 257}) {
    std::vector<float> x = RandomFloats(rng, n, -5.0f, 5.0f);
    x[3] = 9.0f;
    x[3 + 8] = std::numeric_limits<float>::quiet_NaN();
    x[3 + 16] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> want(n), got(n);
    std::vector<double> want_mass(1), got_mass(1);
    const float want_max = Ref().exp_weights(x.data(), n, 1.0f, n, want.data(), want_mass.data());
    const float got_max = fast.exp_weights(x.data(), n, 1.0f, n, got.data(), got_mass.data());
    EXPECT_EQ(want_max, 9.0f) << "n=" << n;
    EXPECT_EQ(got_max, want_max) << "n=" << n;
    EXPECT_EQ(got[3], 1.0f) << "n=" << n << ": the max weighs 1";
  }
}

// The index std::max_element gives (the first of equal largest values; NaN never chosen but at 0).
int64_t MaxElementIndex(const std::vector<float>& x) {
  return std::max_element(x.begin(), x.end()) - x.begin();
}

TEST_P(FastKernels, ArgmaxIsMaxElementsIndex) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(17);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(fast.argmax(nullptr, 0), 0);
  // Every length to past two of the widest steps (64), each ending in a partial step; a 129k
  // vocabulary.
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 140; ++n) lengths.push_back(n);
  lengths.push_back(129280);
  for (int64_t n : lengths) {
    std::vector<float> x = RandomFloats(rng, n, -30.0f, 30.0f);
    auto check = [&](const char* what) {
      const int64_t want = MaxElementIndex(x);
      ASSERT_EQ(Ref().argmax(x.data(), n), want) << what << " n=" << n;
      ASSERT_EQ(fast.argmax(x.data(), n), want) << what << " n=" << n;
    };
    check("random");
    // The largest value at every position, once and twice (the first wins, in any lane).
    const std::vector<int64_t> spots =
        n <= 140 ? std::vector<int64_t>{0, n / 3, n / 2, n - 1}
                 : std::vector<int64_t>{0, 15, 16, 63, 64, 65, n / 2, n - 17, n - 1};
    for (int64_t at : spots) {
      std::vector<float> saved = x;
      x[at] = 100.0f;
      check("one largest");
      for (int64_t later : {at + 1, at + 16, at + 64, n - 1}) {
        if (later <= at || later >= n) continue;
        x[later] = 100.0f;
        check("tie: the first wins");
        x[later] = saved[later];
      }
      x = saved;
    }
    // All equal: index 0. -inf everywhere but one finite value. NaNs after x[0] are never the
    // answer; a NaN at x[0] is (std::max_element's comparisons never replace it).
    std::vector<float> saved = x;
    std::fill(x.begin(), x.end(), -2.5f);
    check("all equal");
    std::fill(x.begin(), x.end(), -inf);
    x[n - 1] = -1e30f;
    check("-inf but the last");
    x = saved;
    for (int64_t i = 1; i < n; i += 3) x[i] = nan;
    check("NaNs after x[0]");
    x[0] = nan;
    check("NaN at x[0]");
    x = saved;
  }
}

// Rows of one sequence for attention: `length` positions in shuffled storage order.
struct AttentionCase {
  int64_t heads, qk_dim, v_dim, length;
  bool shared;  // one key/value head for all heads (absorbed MLA)
};

void RunAttention(const KernelTable& table, const AttentionCase& c, const std::vector<float>& q,
                  const std::vector<const void*>& keys, const std::vector<const void*>& values,
                  float* out) {
  std::vector<float> scratch(std::max<int64_t>(c.length, 1));
  AttentionArgs a;
  a.q = q.data();
  a.num_heads = c.heads;
  a.qk_dim = c.qk_dim;
  a.keys = keys.data();
  a.key_head_stride = c.shared ? 0 : c.qk_dim;
  a.values = values.data();
  a.value_head_stride = c.shared ? 0 : c.v_dim + 3;
  a.v_dim = c.v_dim;
  a.length = c.length;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.qk_dim));
  a.out = out;
  a.scratch = scratch.data();
  table.attention(a);
}

TEST_P(FastKernels, AttentionMatchesRefAndIgnoresThreadCount) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  std::mt19937 rng(7);
  const std::vector<AttentionCase> cases = {
      {16, 576, 512, 1, true},   {16, 576, 512, 65, true}, {16, 576, 512, 1500, true},
      {3, 17, 15, 513, true},    {17, 33, 31, 2000, true}, {1, 1, 1, 7, true},
      {16, 192, 128, 70, false}, {5, 17, 15, 1300, false}, {2, 192, 128, 4100, false},
      {128, 64, 48, 600, true},  {4, 16, 16, 0, true},
  };
  for (const AttentionCase& c : cases) {
    const std::string what = "H=" + std::to_string(c.heads) + " qk=" + std::to_string(c.qk_dim) +
                             " v=" + std::to_string(c.v_dim) + " L=" + std::to_string(c.length) +
                             (c.shared ? " shared" : " per-head");
    const int64_t key_floats = c.shared ? c.qk_dim : c.heads * c.qk_dim;
    const int64_t value_floats = c.shared ? c.v_dim : c.heads * (c.v_dim + 3);
    const std::vector<float> q = RandomFloats(rng, c.heads * c.qk_dim, -2.0f, 2.0f);
    const std::vector<float> kstore = RandomFloats(rng, c.length * key_floats + 1, -2.0f, 2.0f);
    const std::vector<float> vstore = RandomFloats(rng, c.length * value_floats + 1);
    std::vector<int64_t> order(c.length);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<const void*> keys(c.length), values(c.length);
    for (int64_t t = 0; t < c.length; ++t) {
      keys[t] = &kstore[order[t] * key_floats + 1];  // odd float offsets: unaligned rows
      values[t] = &vstore[order[t] * value_floats + 1];
    }
    std::vector<float> want(c.heads * c.v_dim), got(c.heads * c.v_dim, NAN);
    RunAttention(Ref(), c, q, keys, values, want.data());
    threads::SetNumThreads(2);
    RunAttention(fast, c, q, keys, values, got.data());
    // Tolerance: rounding of sum_t p_t v_t is relative to sum_t p_t |v_t| <= max |v| = 1.
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 2e-5) << what << " at " << i;
    threads::SetNumThreads(1);
    std::vector<float> single(got.size());
    RunAttention(fast, c, q, keys, values, single.data());
    ASSERT_EQ(0, std::memcmp(single.data(), got.data(), sizeof(float) * got.size())) << what;
  }
}

// attention_queries: each query's output must match `attention` on it alone (the reference's
// math; within rounding), and must be bit-identical whether the query comes alone or inside a
// larger call, on 1 or 2 threads: the chunk a prefill token arrives in must not change its
// result. Lengths cover one block, block tails, several blocks, 0, and a tile's queries far apart;
// starts (sliding windows) cover 0, odd and even positions inside blocks, block edges, a start at
// the length (nothing attended) and consecutive queries whose windows cross block edges.
struct QueriesCase {
  int64_t heads, qk_dim, v_dim;
  bool shared;
  std::vector<int64_t> lengths;
  std::vector<int64_t> starts = {};  // empty: every query from position 0
};

// Queries at positions [first, first + count), each attending its last `window` positions.
QueriesCase WindowCase(int64_t heads, int64_t qk_dim, int64_t v_dim, int64_t first, int64_t count,
                       int64_t window) {
  QueriesCase c{heads, qk_dim, v_dim, false, {}};
  for (int64_t p = first; p < first + count; ++p) {
    c.lengths.push_back(p + 1);
    c.starts.push_back(std::max<int64_t>(0, p + 1 - window));
  }
  return c;
}

struct QueriesData {
  std::vector<float> q, kstore, vstore;
  std::vector<const void*> keys, values;
  QueriesAttentionArgs args;  // points into the vectors above
};

void MakeQueries(const QueriesCase& c, std::mt19937& rng, QueriesData& d) {
  const int64_t positions = *std::max_element(c.lengths.begin(), c.lengths.end());
  const int64_t nq = static_cast<int64_t>(c.lengths.size());
  const int64_t key_floats = c.shared ? c.qk_dim : c.heads * c.qk_dim;
  const int64_t value_floats = c.shared ? c.v_dim : c.heads * (c.v_dim + 3);
  d.q = RandomFloats(rng, nq * c.heads * c.qk_dim, -2.0f, 2.0f);
  d.kstore = RandomFloats(rng, positions * key_floats + 1, -2.0f, 2.0f);
  d.vstore = RandomFloats(rng, positions * value_floats + 1);
  std::vector<int64_t> order(positions);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  d.keys.resize(positions);
  d.values.resize(positions);
  for (int64_t t = 0; t < positions; ++t) {
    d.keys[t] = &d.kstore[order[t] * key_floats + 1];  // odd float offsets: unaligned rows
    d.values[t] = &d.vstore[order[t] * value_floats + 1];
  }
  QueriesAttentionArgs& qa = d.args;
  qa.shared.num_heads = c.heads;
  qa.shared.qk_dim = c.qk_dim;
  qa.shared.keys = d.keys.data();
  qa.shared.key_head_stride = c.shared ? 0 : c.qk_dim;
  qa.shared.values = d.values.data();
  qa.shared.value_head_stride = c.shared ? 0 : c.v_dim + 3;
  qa.shared.v_dim = c.v_dim;
  qa.shared.scale = 1.0f / std::sqrt(static_cast<float>(c.qk_dim));
  qa.num_queries = nq;
  qa.q = d.q.data();
  qa.lengths = c.lengths.data();
  qa.starts = c.starts.empty() ? nullptr : c.starts.data();
}

int64_t StartOf(const QueriesCase& c, int64_t i) { return c.starts.empty() ? 0 : c.starts[i]; }

std::vector<QueriesCase> QueriesCases() {
  std::vector<int64_t> prefix(40);
  std::iota(prefix.begin(), prefix.end(), 1000);  // 40 consecutive positions: 2.5 tiles
  return {
      {16, 192, 128, false, {1, 2, 3, 64, 65, 130, 511, 512, 513, 700, 1029, 0}},
      {5, 17, 15, false, prefix},
      {3, 33, 31, true, {7, 600, 1, 64, 2000}},
      {1, 1, 1, false, {3, 1, 2}},
      {16, 192, 128, false, {1, 65, 130, 513, 700, 1029, 64, 5, 3}, {0, 1, 63, 200, 637, 1028, 64,
                                                                      5, 2}},
      WindowCase(5, 17, 15, 1000, 40, 34),
      WindowCase(2, 32, 16, 10, 100, 77),
      WindowCase(2, 32, 16, 200, 100, 77),  // two tasks whose first blocks differ
      {3, 33, 31, true, {7, 600, 64, 2000}, {3, 550, 1, 1999}},  // one shared head
  };
}

// got (a call over r's queries, or over queries of r's shape) within `tolerance` of the
// reference's `attention` on each of r's queries alone.
void ExpectEachQueryNearRef(const QueriesCase& c, const QueriesData& r,
                            const std::vector<float>& got, double tolerance,
                            const std::string& name) {
  const int64_t per_query = c.heads * c.v_dim;
  std::vector<float> want(per_query), scratch(r.keys.size() + 1);
  for (int64_t i = 0; i < r.args.num_queries; ++i) {
    AttentionArgs a = r.args.shared;
    const int64_t start = std::min(StartOf(c, i), c.lengths[i]);
    a.keys = r.keys.data() + start;
    a.values = r.values.data() + start;
    a.q = r.q.data() + i * c.heads * c.qk_dim;
    a.length = c.lengths[i] - start;
    a.out = want.data();
    a.scratch = scratch.data();
    Ref().attention(a);
    for (int64_t j = 0; j < per_query; ++j) {
      ASSERT_NEAR(got[i * per_query + j], want[j], tolerance)
          << name << " H=" << c.heads << " query " << i << " length " << c.lengths[i]
          << " start " << StartOf(c, i);
    }
  }
}

void ExpectQueriesMatchRef(const KernelTable& table, const std::string& name) {
  std::mt19937 rng(11);
  for (const QueriesCase& c : QueriesCases()) {
    QueriesData d;
    MakeQueries(c, rng, d);
    std::vector<float> got(d.args.num_queries * c.heads * c.v_dim, NAN);
    d.args.out = got.data();
    table.attention_queries(d.args);
    // Rounding of sum_t p_t v_t is relative to sum_t p_t |v_t| <= max |v| = 1.
    ExpectEachQueryNearRef(c, d, got, 2e-5, name);
  }
}

TEST(RefKernels, AttentionQueriesMatchesOneQueryAtATime) { ExpectQueriesMatchRef(Ref(), "ref"); }

// Each query of d's call, run alone (d.args' flags kept) on 1 and 2 threads, must give its
// output in `all` (the whole call's) bit for bit.
void ExpectEachQueryAloneGivesTheSame(const KernelTable& fast, const QueriesCase& c,
                                      const QueriesData& d, const std::vector<float>& all) {
  const int64_t per_query = c.heads * c.v_dim;
  for (int threads : {1, 2}) {
    threads::SetNumThreads(threads);
    for (int64_t i = 0; i < d.args.num_queries; ++i) {
      QueriesAttentionArgs one = d.args;
      one.num_queries = 1;
      one.q = d.q.data() + i * c.heads * c.qk_dim;
      one.lengths = &c.lengths[i];
      one.starts = c.starts.empty() ? nullptr : &c.starts[i];
      std::vector<float> alone(per_query, NAN);
      one.out = alone.data();
      fast.attention_queries(one);
      ASSERT_EQ(0, std::memcmp(alone.data(), &all[i * per_query], sizeof(float) * per_query))
          << "H=" << c.heads << " query " << i << " length " << c.lengths[i]
          << " threads=" << threads;
    }
  }
}

TEST_P(FastKernels, AttentionQueriesMatchesRefAndIgnoresBatchAndThreads) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  ExpectQueriesMatchRef(fast, GetParam().name);
  std::mt19937 rng(12);
  for (const QueriesCase& c : QueriesCases()) {
    QueriesData d;
    MakeQueries(c, rng, d);
    const int64_t nq = d.args.num_queries, per_query = c.heads * c.v_dim;
    threads::SetNumThreads(2);
    std::vector<float> all(nq * per_query, NAN);
    d.args.out = all.data();
    fast.attention_queries(d.args);
    ExpectEachQueryAloneGivesTheSame(fast, c, d, all);
  }
}

// got (d's call under bf16_products) against the reference over q, keys and values rounded to
// bf16: what is left is the probabilities' rounding, at most 2^-9 of each, and the order of f32
// sums.
void ExpectNearRefOverRoundedInputs(const QueriesCase& c, const QueriesData& d,
                                    const std::vector<float>& got) {
  QueriesData r = d;
  for (float& v : r.q) v = RoundToBF16(v);
  for (float& v : r.kstore) v = RoundToBF16(v);
  for (float& v : r.vstore) v = RoundToBF16(v);
  const float* k0 = d.kstore.data();
  const float* v0 = d.vstore.data();
  for (size_t t = 0; t < r.keys.size(); ++t) {
    r.keys[t] = r.kstore.data() + (static_cast<const float*>(d.keys[t]) - k0);
    r.values[t] = r.vstore.data() + (static_cast<const float*>(d.values[t]) - v0);
  }
  // Probabilities rounded to bf16 move sum_t p_t v_t by at most 2^-9 max |v| (|v| <= 1).
  ExpectEachQueryNearRef(c, r, got, 3e-3, "bf16 products");
}

// attention_queries with bf16_products (bf16 compute): on the AVX-512 table of a CPU with
// AVX512_BF16, the reference over q, keys and values rounded to bf16 (what is left: the
// probabilities' rounding, at most 2^-9 of each, and the order of f32 sums), and still each
// query's output bit-identical alone or in a larger call, on 1 or 2 threads. Every other table
// ignores the flag: its output is bit-identical to the call without it.
TEST_P(FastKernels, AttentionQueriesBf16ProductsRoundOnlyWhereTheCpuCanAndIgnoreTheBatch) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  const bool rounds = GetParam().name == std::string("avx512") && Avx512HasBf16Dot();
  std::mt19937 rng(13);
  for (const QueriesCase& c : QueriesCases()) {
    QueriesData d;
    MakeQueries(c, rng, d);
    const int64_t nq = d.args.num_queries, per_query = c.heads * c.v_dim;
    threads::SetNumThreads(2);
    std::vector<float> f32(nq * per_query, NAN), got(nq * per_query, NAN);
    d.args.out = f32.data();
    fast.attention_queries(d.args);
    d.args.bf16_products = true;
    d.args.out = got.data();
    fast.attention_queries(d.args);
    if (!rounds) {
      EXPECT_EQ(0, std::memcmp(f32.data(), got.data(), sizeof(float) * f32.size()))
          << GetParam().name << " H=" << c.heads << ": bf16_products must be ignored here";
      continue;
    }
    ExpectNearRefOverRoundedInputs(c, d, got);
    ExpectEachQueryAloneGivesTheSame(fast, c, d, got);
  }
}

// A position past a query's length holds another query's row: an inf or NaN value there must not
// reach the query (probability 0 times inf is NaN). Odd lengths end in half a position pair in
// the bf16 kernel; every table, bf16 products or not, gives query 0 its one value.
TEST_P(FastKernels, AttentionQueriesIgnoreNonFiniteValuesPastAQuerysLength) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  threads::SetNumThreads(1);
  for (const float bad : {INFINITY, -INFINITY, NAN}) {
    for (const bool bf16 : {false, true}) {
      // 3 queries of 1 head, qk 1, v 1: lengths 1, 3, 2; positions 1 and 2 hold bad values.
      const std::vector<float> keys = {1.0f, 0.5f, -0.5f}, values = {2.0f, bad, bad};
      const std::vector<float> q = {1.0f, 1.0f, 1.0f};
      const std::vector<int64_t> lengths = {1, 3, 2};
      std::vector<const void*> key_ptrs, value_ptrs;
      for (int t = 0; t < 3; ++t) {
        key_ptrs.push_back(&keys[t]);
        value_ptrs.push_back(&values[t]);
      }
      QueriesAttentionArgs qa;
      qa.shared.num_heads = 1;
      qa.shared.qk_dim = 1;
      qa.shared.v_dim = 1;
      qa.shared.keys = key_ptrs.data();
      qa.shared.key_head_stride = 1;
      qa.shared.values = value_ptrs.data();
      qa.shared.value_head_stride = 1;
      qa.shared.scale = 1.0f;
      qa.num_queries = 3;
      qa.q = q.data();
      qa.lengths = lengths.data();
      std::vector<float> out(3, -1.0f);
      qa.out = out.data();
      qa.bf16_products = bf16;
      fast.attention_queries(qa);
      EXPECT_EQ(out[0], 2.0f) << GetParam().name << " bad " << bad << " bf16 " << bf16;
    }
  }
}

// Keys and values before a query's start (a sliding window's earlier positions) never reach it,
// whatever they hold: with inf, -inf or NaN in every key and value before query i's start, query
// i gives the bits it gives over finite rows there, for each i of c's consecutive queries. Their
// starts are odd and even, so some windows begin on the second position of a bf16 pair whose
// first position holds the bad value.
void ExpectRowsBeforeStartNeverReachTheQuery(const KernelTable& table, bool bf16_products,
                                             const std::string& name, const QueriesCase& c) {
  const int64_t per_query = c.heads * c.v_dim;
  std::mt19937 rng(21);
  QueriesData d;
  MakeQueries(c, rng, d);
  d.args.bf16_products = bf16_products;
  std::vector<float> clean(d.args.num_queries * per_query, NAN);
  d.args.out = clean.data();
  table.attention_queries(d.args);
  const std::vector<float> keys = d.kstore, values = d.vstore;
  for (const float bad : {INFINITY, -INFINITY, NAN}) {
    for (int64_t i = 0; i < d.args.num_queries; ++i) {
      for (int64_t t = 0; t < c.starts[i]; ++t) {
        float* k = const_cast<float*>(static_cast<const float*>(d.keys[t]));
        float* v = const_cast<float*>(static_cast<const float*>(d.values[t]));
        std::fill(k, k + c.heads * c.qk_dim, bad);
        for (int64_t h = 0; h < c.heads; ++h) {
          std::fill(v + h * (c.v_dim + 3), v + h * (c.v_dim + 3) + c.v_dim, bad);
        }
      }
      std::vector<float> dirty(clean.size(), NAN);
      d.args.out = dirty.data();
      table.attention_queries(d.args);
      ASSERT_EQ(0, std::memcmp(&clean[i * per_query], &dirty[i * per_query],
                               sizeof(float) * per_query))
          << name << " bad " << bad << " bf16 " << bf16_products << " query " << i << " start "
          << c.starts[i];
      std::copy(keys.begin(), keys.end(), d.kstore.begin());  // in place: d.keys point there
      std::copy(values.begin(), values.end(), d.vstore.begin());
    }
  }
}

void ExpectRowsBeforeStartsNeverReachTheQueries(const KernelTable& table, bool bf16_products,
                                                const std::string& name) {
  // Windows of 5 in one block; windows of 70 over two, with some queries attending block 1 whole
  // (on AMX: a tile product beside the rows kept out of it).
  for (const QueriesCase& c :
       {WindowCase(2, 24, 16, 20, 40, 5), WindowCase(2, 24, 16, 120, 40, 70)}) {
    ExpectRowsBeforeStartNeverReachTheQuery(table, bf16_products, name, c);
  }
}

// kQueriesBlockPositions: keys indexed from a position 64 later (64 more rows before them, every
// start and length 64 more) give each query the same bits. What mla_attention.cc relies on to
// give a sliding-window token the same bits wherever its chunk starts.
void ExpectKeysShiftedByWholeBlocksGiveTheSameBits(const KernelTable& table, bool bf16_products,
                                                  const std::string& name) {
  const QueriesCase c = WindowCase(2, 24, 16, 100, 30, 70);
  std::mt19937 rng(22);
  QueriesData d;
  MakeQueries(c, rng, d);
  d.args.bf16_products = bf16_products;
  const int64_t size = d.args.num_queries * c.heads * c.v_dim;
  std::vector<float> want(size, NAN), got(size, NAN);
  d.args.out = want.data();
  table.attention_queries(d.args);
  const int64_t shift = kQueriesBlockPositions;
  std::vector<const void*> keys(shift, d.keys[0]), values(shift, d.values[0]);
  keys.insert(keys.end(), d.keys.begin(), d.keys.end());
  values.insert(values.end(), d.values.begin(), d.values.end());
  std::vector<int64_t> lengths = c.lengths, starts = c.starts;
  for (int64_t& v : lengths) v += shift;
  for (int64_t& v : starts) v += shift;
  QueriesAttentionArgs shifted = d.args;
  shifted.shared.keys = keys.data();
  shifted.shared.values = values.data();
  shifted.lengths = lengths.data();
  shifted.starts = starts.data();
  shifted.out = got.data();
  table.attention_queries(shifted);
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * size))
      << name << " bf16 " << bf16_products;
}

// QueriesAttentionArgs::shared_keys (MLA's expanded keys: each head's k_nope from kv_b's output,
// the rotary key shared): the same bits as over whole key rows holding both, for k_nope dims that
// end inside, at and past a 32-value pair group of the bf16 packing, causal and windowed, per-head
// keys and one key head.
void ExpectSharedKeysGiveTheWholeKeysBits(const KernelTable& table, bool bf16_products,
                                          const std::string& name) {
  struct Dims {
    int64_t heads, nope, rope, v;
    bool one_key_head;  // key head stride 0
  };
  for (const Dims& dims : {Dims{3, 20, 13, 9, false}, Dims{2, 128, 64, 32, false},
                           Dims{2, 32, 8, 16, false}, Dims{1, 45, 19, 16, false},
                           Dims{3, 20, 13, 16, true}}) {
    for (const bool window : {false, true}) {
      QueriesCase c = window ? WindowCase(dims.heads, dims.nope + dims.rope, dims.v, 90, 50, 70)
                             : QueriesCase{dims.heads, dims.nope + dims.rope, dims.v, false,
                                           {1, 64, 65, 140, 7, 100}};
      c.shared = dims.one_key_head;
      std::mt19937 rng(23);
      QueriesData d;
      MakeQueries(c, rng, d);
      d.args.bf16_products = bf16_products;
      const int64_t size = d.args.num_queries * c.heads * c.v_dim;
      std::vector<float> want(size, NAN), got(size, NAN);
      // Each position's k_nope per head at a stride of nope + 5, and its rotary key once (head
      // 0's: the whole rows get it in every head, as MLA's do).
      const int64_t positions = static_cast<int64_t>(d.keys.size()), stride = dims.nope + 5;
      const int64_t key_heads = c.shared ? 1 : dims.heads;
      std::vector<float> nope(positions * key_heads * stride), rope(positions * dims.rope);
      std::vector<const void*> nope_ptrs(positions);
      std::vector<const float*> rope_ptrs(positions);
      for (int64_t t = 0; t < positions; ++t) {
        float* key = const_cast<float*>(static_cast<const float*>(d.keys[t]));
        for (int64_t h = 0; h < key_heads; ++h) {
          float* whole = key + h * c.qk_dim;
          if (h > 0) std::copy(key + dims.nope, key + c.qk_dim, whole + dims.nope);  // head 0's
          std::copy(whole, whole + dims.nope, &nope[(t * key_heads + h) * stride]);
        }
        std::copy(key + dims.nope, key + c.qk_dim, &rope[t * dims.rope]);
        nope_ptrs[t] = &nope[t * key_heads * stride];
        rope_ptrs[t] = &rope[t * dims.rope];
      }
      d.args.out = want.data();
      table.attention_queries(d.args);  // over the whole rows, each head's with the shared part
      QueriesAttentionArgs split = d.args;
      split.shared.keys = nope_ptrs.data();
      split.shared.key_head_stride = c.shared ? 0 : stride;
      split.shared_keys = rope_ptrs.data();
      split.shared_key_dims = dims.rope;
      split.out = got.data();
      table.attention_queries(split);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * size))
          << name << " bf16 " << bf16_products << " nope " << dims.nope << " rope " << dims.rope
          << " window " << window;
    }
  }
}

TEST(RefKernels, AttentionQueriesOverSharedKeysEqualWholeKeys) {
  ExpectSharedKeysGiveTheWholeKeysBits(Ref(), false, "ref");
}

TEST_P(FastKernels, AttentionQueriesOverSharedKeysEqualWholeKeys) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  threads::SetNumThreads(2);
  for (const bool bf16 : {false, true}) {
    ExpectSharedKeysGiveTheWholeKeysBits(fast, bf16, GetParam().name);
  }
}

TEST(AmxAttention, QueriesOverSharedKeysEqualWholeKeys) {
  if (AmxKernels() == nullptr) GTEST_SKIP() << "no AMX-BF16 (or no OS tile state) here";
  ThreadCount restore;
  threads::SetNumThreads(2);
  ExpectSharedKeysGiveTheWholeKeysBits(*AmxKernels(), true, "amx");
}

TEST_P(FastKernels, AttentionQueriesNeverReadRowsBeforeAQuerysStart) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  threads::SetNumThreads(2);
  for (const bool bf16 : {false, true}) {
    ExpectRowsBeforeStartsNeverReachTheQueries(fast, bf16, GetParam().name);
    ExpectKeysShiftedByWholeBlocksGiveTheSameBits(fast, bf16, GetParam().name);
  }
}

TEST(AmxAttention, QueriesNeverReadRowsBeforeAQuerysStart) {
  if (AmxKernels() == nullptr) GTEST_SKIP() << "no AMX-BF16 (or no OS tile state) here";
  ThreadCount restore;
  threads::SetNumThreads(2);
  ExpectRowsBeforeStartsNeverReachTheQueries(*AmxKernels(), true, "amx");
  ExpectKeysShiftedByWholeBlocksGiveTheSameBits(*AmxKernels(), true, "amx");
}

// The AMX table's attention_queries under bf16 products: TDPBF16PS where AmxTakesQueries (value
// dims of whole 16-column tiles; here dq 192 and 33, which pads the keys to a whole tile, and
// value tiles of 1 to 4 per group of 64 columns), the vdpbf16ps kernel of the AVX-512 table
// otherwise, bit for bit. Near the reference over the rounded inputs, and each query's output
// bit-identical alone or in a larger call, on 1 or 2 threads: lengths end inside blocks, at their
// edges, at 0; 40 consecutive queries cross a block edge inside a tile of 16, 100 fill 2 tasks.
TEST(AmxAttention, QueriesRunOnTilesNearRefAndIgnoreTheBatch) {
  if (AmxKernels() == nullptr) GTEST_SKIP() << "no AMX-BF16 (or no OS tile state) here";
  ThreadCount restore;
  const KernelTable& amx = *AmxKernels();
  std::vector<int64_t> prefix(40), chunk(100);
  std::iota(prefix.begin(), prefix.end(), 1000);
  std::iota(chunk.begin(), chunk.end(), 200);  // 2 tasks of queries
  struct Case {
    QueriesCase c;
    bool tiles;
  };
  const std::vector<Case> cases = {
      {{16, 192, 128, false, {1, 2, 3, 64, 65, 130, 511, 512, 513, 700, 1029, 0}}, true},
      {{2, 96, 32, false, chunk}, true},
      {{2, 64, 48, false, prefix}, true},
      {{3, 33, 80, true, {7, 600, 1, 64, 2000, 31, 32, 33}}, true},
      {{1, 40, 16, false, {3, 1, 2, 16, 17}}, true},
      {{5, 17, 15, false, prefix}, false},
      {{3, 33, 31, true, {7, 600, 1, 64, 2000}}, false},
      // Sliding windows: blocks attended in part at both ends, tiles of 16 queries whose starts
      // differ, starts at and past lengths.
      {{16, 192, 128, false, {1, 65, 130, 513, 700, 1029, 64, 5, 3},
        {0, 1, 63, 200, 637, 1028, 64, 5, 2}}, true},
      {WindowCase(2, 96, 32, 200, 100, 77), true},
      {WindowCase(2, 64, 48, 1000, 40, 64), true},
      {WindowCase(5, 17, 15, 1000, 40, 34), false},
  };
  std::mt19937 rng(19);
  for (const Case& k : cases) {
    const QueriesCase& c = k.c;
    SCOPED_TRACE(::testing::Message()
                 << "H=" << c.heads << " dq=" << c.qk_dim << " dv=" << c.v_dim);
    QueriesData d;
    MakeQueries(c, rng, d);
    d.args.bf16_products = true;
    EXPECT_EQ(amx::AmxTakesQueries(d.args), k.tiles);
    const int64_t size = d.args.num_queries * c.heads * c.v_dim;
    threads::SetNumThreads(2);
    std::vector<float> got(size, NAN), other(size, NAN);
    d.args.out = got.data();
    amx.attention_queries(d.args);
    d.args.out = other.data();
    if (k.tiles) {
      amx::AttentionQueriesAmx(d.args);
    } else {
      Avx512Kernels()->attention_queries(d.args);
    }
    ASSERT_EQ(0, std::memcmp(got.data(), other.data(), sizeof(float) * size))
        << "the table must run " << (k.tiles ? "the AMX kernel" : "the AVX-512 one");
    ExpectNearRefOverRoundedInputs(c, d, got);
    ExpectEachQueryAloneGivesTheSame(amx, c, d, got);
  }
}

// A value of inf or NaN past a query's length (another query's position, in its last block)
// would reach it through a tile product (0 times inf is NaN): the AMX kernel adds each query's
// last block on the vector units over its own positions, so 40 consecutive queries whose later
// positions hold bad values keep finite outputs before them, each bit-identical to its call alone
// (where those positions are not even in the call), on 1 and 2 threads.
TEST(AmxAttention, ValuesWithInfOrNanPastAQuerysLengthNeverReachIt) {
  if (AmxKernels() == nullptr) GTEST_SKIP() << "no AMX-BF16 (or no OS tile state) here";
  ThreadCount restore;
  std::vector<int64_t> lengths(40);
  std::iota(lengths.begin(), lengths.end(), 1);  // positions 0..39, one query ending at each
  const QueriesCase c{2, 24, 16, false, lengths};
  for (const float bad : {INFINITY, -INFINITY, NAN}) {
    std::mt19937 rng(20);
    QueriesData d;
    MakeQueries(c, rng, d);
    d.args.bf16_products = true;
    for (int64_t t = 21; t < 40; ++t) {  // values of positions 21.. (both heads), in part bad
      float* v = const_cast<float*>(static_cast<const float*>(d.values[t]));
      v[t % c.v_dim] = bad;
      v[c.v_dim + 3 + t % c.v_dim] = bad;
    }
    ASSERT_TRUE(amx::AmxTakesQueries(d.args));
    const int64_t per_query = c.heads * c.v_dim;
    std::vector<float> all(40 * per_query, -1.0f);
    d.args.out = all.data();
    threads::SetNumThreads(2);
    AmxKernels()->attention_queries(d.args);
    for (int64_t i = 0; i < 21 * per_query; ++i) {
      ASSERT_TRUE(std::isfinite(all[i])) << "bad " << bad << " query " << i / per_query;
    }
    QueriesCase first = c;  // the queries that attend no bad value
    first.lengths.resize(21);
    d.args.num_queries = 21;
    d.args.lengths = first.lengths.data();
    ExpectEachQueryAloneGivesTheSame(*AmxKernels(), first, d, all);
    ExpectNearRefOverRoundedInputs(first, d, all);
  }
}

// Keys whose score is -inf weigh 0, also when a whole first block of a segment (64 rows) scores
// -inf, where the running max is still -inf (exp(-inf - -inf) would make the output NaN): the
// output is the one finite key's value, as the reference gives, over f32 and bf16 rows, bf16
// products or not, at lengths that end in the first block's segment and past it.
TEST_P(FastKernels, AttentionWeighsMinusInfScoresZeroFromTheFirstBlock) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  for (const int threads : {1, 2}) {
    threads::SetNumThreads(threads);
    for (const int64_t length : {65, 100, 600, 1100}) {
      for (const bool bf16 : {false, true}) {
        // One shared head, qk 4, v 3: keys 0..63 and 512..575 score -inf (element 3 is -inf), the
        // rest 2; every value is (1, 2, 3).
        const int64_t qk = 4, dv = 3;
        std::vector<float> rows(length * qk, 0.5f);
        for (int64_t t = 0; t < length; ++t) {
          if (t < 64 || (t >= 512 && t < 576)) rows[t * qk + 3] = -INFINITY;
        }
        std::vector<float> values(length * dv);
        for (int64_t t = 0; t < length; ++t) {
          for (int64_t c = 0; c < dv; ++c) values[t * dv + c] = static_cast<float>(c + 1);
        }
        std::vector<uint16_t> rows16(rows.size()), values16(values.size());
        for (size_t i = 0; i < rows.size(); ++i) rows16[i] = F32ToBF16(rows[i]);
        for (size_t i = 0; i < values.size(); ++i) values16[i] = F32ToBF16(values[i]);
        std::vector<const void*> keys(length), vals(length);
        for (int64_t t = 0; t < length; ++t) {
          keys[t] = bf16 ? static_cast<const void*>(&rows16[t * qk]) : &rows[t * qk];
          vals[t] = bf16 ? static_cast<const void*>(&values16[t * dv]) : &values[t * dv];
        }
        const std::vector<float> q = {1.0f, 1.0f, 1.0f, 1.0f};
        std::vector<float> out(dv, NAN), scratch(length);
        AttentionArgs a;
        a.q = q.data();
        a.num_heads = 1;
        a.qk_dim = qk;
        a.rows = bf16 ? DType::kBF16 : DType::kF32;
        a.bf16_products = bf16;
        a.keys = keys.data();
        a.values = vals.data();
        a.v_dim = dv;
        a.length = length;
        a.scale = 1.0f;
        a.out = out.data();
        a.scratch = scratch.data();
        fast.attention(a);
        for (int64_t c = 0; c < dv; ++c) {
          EXPECT_EQ(out[c], static_cast<float>(c + 1))
              << GetParam().name << " length " << length << " bf16 " << bf16 << " threads "
              << threads;
        }
      }
    }
  }
}

// relu(NaN) is 0 in the indexer's scores, in the reference and the vector kernels alike: a key
// with a NaN element scores as one whose heads are all non-positive, never NaN (the top-k's
// comparisons need a total order).
TEST_P(FastKernels, IndexScoresCountANanHeadAsZero) {
  LATENT_REQUIRE_TABLE(fast);
  const int64_t heads = 3, dim = 4;
  const std::vector<float> q = {0.5f, 0.5f, -0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f,
                                0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<float> w = {1.0f, 1.0f, 1.0f};
  const std::vector<float> keys = {1.0f, 1.0f, NAN, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<const void*> key_rows = {&keys[0], &keys[4]};
  for (const KernelTable* table : {&Ref(), &fast}) {
    std::vector<float> scores(2, -1.0f);
    IndexScoreArgs a;
    a.q = q.data();
    a.w = w.data();
    a.heads = heads;
    a.dim = dim;
    a.scale = 0.5f;
    a.keys = key_rows.data();
    a.n = 2;
    a.scores = scores.data();
    table->index_scores(a);
    EXPECT_EQ(scores[0], 0.0f) << GetParam().name;
    EXPECT_EQ(scores[1], 2.5f) << GetParam().name;  // relu(0.5 x 1) + 2 relu(0.5 x 2)
  }
}

// norm_rope: the reference must equal rms_norm followed by ops::Rope's rotation (written out
// here), and the fast kernel must equal the fast rms_norm and the same rotation bit for bit, for
// both pairings, rotary widths with tails (2, 6, 34, 64, 66) and a bf16 norm weight.
void RotateExpected(float* x, int64_t rope, bool interleaved, const float* cos, const float* sin) {
  const int64_t half = rope / 2;
  for (int64_t i = 0; i < half; ++i) {
    float* a = interleaved ? &x[2 * i] : &x[i];
    float* b = interleaved ? &x[2 * i + 1] : &x[i + half];
    const float x0 = *a, x1 = *b;
    *a = x0 * cos[i] - x1 * sin[i];
    *b = x1 * cos[i] + x0 * sin[i];
  }
}

void ExpectNormRope(const KernelTable& table, const std::string& name) {
  std::mt19937 rng(21);
  for (const bool interleaved : {true, false}) {
    for (const int64_t rope : {2, 6, 34, 64, 66}) {
      const int64_t tokens = 3, heads = 5, latent = 37, nope = 7;
      const int64_t kv_stride = latent + rope + 3, q_stride = nope + rope + 1;
      const std::vector<float> kv0 = RandomFloats(rng, tokens * kv_stride, -3.0f, 3.0f);
      const std::vector<float> q0 = RandomFloats(rng, tokens * heads * q_stride, -3.0f, 3.0f);
      const std::vector<float> cos = RandomFloats(rng, tokens * rope / 2, -1.0f, 1.0f);
      const std::vector<float> sin = RandomFloats(rng, tokens * rope / 2, -1.0f, 1.0f);
      std::vector<uint16_t> weight;
      for (float v : RandomFloats(rng, latent, 0.5f, 1.5f)) weight.push_back(F32ToBF16(v));
      std::vector<float> kv = kv0, q = q0, kv_want = kv0, q_want = q0;
      NormRopeArgs a;
      a.tokens = tokens;
      a.kv = kv.data();
      a.kv_stride = kv_stride;
      a.latent = latent;
      a.norm_weight = weight.data();
      a.norm_dtype = DType::kBF16;
      a.eps = 1e-6f;
      a.q = q.data();
      a.heads = heads;
      a.q_stride = q_stride;
      a.q_offset = nope;
      a.rope = rope;
      a.interleaved = interleaved;
      a.cos = cos.data();
      a.sin = sin.data();
      table.norm_rope(a);
      for (int64_t t = 0; t < tokens; ++t) {
        float* row = &kv_want[t * kv_stride];
        table.rms_norm(row, 1, latent, weight.data(), DType::kBF16, 1e-6f, row);
        RotateExpected(row + latent, rope, interleaved, &cos[t * rope / 2], &sin[t * rope / 2]);
        for (int64_t h = 0; h < heads; ++h) {
          RotateExpected(&q_want[(t * heads + h) * q_stride + nope], rope, interleaved,
                         &cos[t * rope / 2], &sin[t * rope / 2]);
        }
      }
      const std::string what = name + " rope=" + std::to_string(rope) +
                               (interleaved ? " interleaved" : " halves");
      ASSERT_EQ(0, std::memcmp(kv.data(), kv_want.data(), sizeof(float) * kv.size())) << what;
      ASSERT_EQ(0, std::memcmp(q.data(), q_want.data(), sizeof(float) * q.size())) << what;
    }
  }
}

TEST(RefKernels, NormRopeIsNormThenRotation) { ExpectNormRope(Ref(), "ref"); }

TEST_P(FastKernels, NormRopeIsNormThenRotation) {
  LATENT_REQUIRE_TABLE(fast);
  ExpectNormRope(fast, GetParam().name);
}

// Index scores of query q (heads x dim, weights w) over key_rows, n of them, in `format`.
IndexScoreArgs IndexArgs(const std::vector<float>& q, const std::vector<float>& w, int64_t heads,
                         int64_t dim, const std::vector<const void*>& key_rows, DType format) {
  IndexScoreArgs a;
  a.q = q.data();
  a.w = w.data();
  a.heads = heads;
  a.dim = dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(dim));
  a.keys = key_rows.data();
  a.rows = RowFormat(format);
  a.n = static_cast<int64_t>(key_rows.size());
  return a;
}

// index_scores: the fast kernel against the reference (a dot summed in another order: relative
// error ~ dim * 2^-24 of sum |q||k| per head), head counts with tails (64, 7, 17, 130), and each
// key's score bit-identical whether scored alone or in any run of keys.
TEST_P(FastKernels, IndexScoresMatchRefAndIgnoreTheRun) {
  LATENT_REQUIRE_TABLE(fast);
  std::mt19937 rng(31);
  for (const int64_t heads : {64, 7, 17, 130}) {
    for (const int64_t dim : {128, 5, 33}) {
      const int64_t n = 41;
      const std::vector<float> q = RandomFloats(rng, heads * dim, -1.0f, 1.0f);
      const std::vector<float> w = RandomFloats(rng, heads, -1.0f, 1.0f);
      const std::vector<float> keys = RandomFloats(rng, n * dim, -1.0f, 1.0f);
      std::vector<const void*> key_rows(n);  // [n] -> key j
      for (int64_t j = 0; j < n; ++j) key_rows[j] = &keys[j * dim];
      IndexScoreArgs a = IndexArgs(q, w, heads, dim, key_rows, DType::kF32);
      std::vector<float> want(n), got(n, NAN);
      a.scores = want.data();
      Ref().index_scores(a);
      a.scores = got.data();
      fast.index_scores(a);
      const std::string what = "heads=" + std::to_string(heads) + " dim=" + std::to_string(dim);
      // |score| error <= sum_h |w_h| * scale * dim * 2^-23 * sum_c |q_c k_c| <= heads * dim * 1.2e-7.
      for (int64_t j = 0; j < n; ++j)
        ASSERT_NEAR(got[j], want[j], 1.2e-7 * heads * dim * a.scale) << what << " key " << j;
      for (int64_t j0 : {0, 1, 3, 7, 40}) {  // runs starting mid-tile, and single keys
        std::vector<float> part(n - j0, NAN);
        a.keys = key_rows.data() + j0;
        a.n = n - j0;
        a.scores = part.data();
        fast.index_scores(a);
        ASSERT_EQ(0, std::memcmp(part.data(), got.data() + j0, sizeof(float) * part.size()))
            << what << " from key " << j0;
      }
    }
  }
}

// A query of `heads` heads over `rows` (bf16, one shared head: the key, the value its first
// v_dim) as MLA's absorbed decode calls attention, with a softmax peaked enough to matter.
AttentionArgs SharedBf16Rows(const std::vector<float>& q, int64_t heads, int64_t qk_dim,
                             int64_t v_dim, const std::vector<const void*>& rows,
                             std::vector<float>& scratch) {
  scratch.resize(rows.size() + 1);
  AttentionArgs a;
  a.q = q.data();
  a.num_heads = heads;
  a.qk_dim = qk_dim;
  a.rows = RowFormat(DType::kBF16);
  a.keys = rows.data();
  a.values = rows.data();
  a.v_dim = v_dim;
  a.length = static_cast<int64_t>(rows.size());
  a.scale = 1.0f / std::sqrt(static_cast<float>(qk_dim)) * 4.0f;
  a.scratch = scratch.data();
  return a;
}

// The reference's attention of a with its query rounded to bf16: what bf16 products compute but
// for the probabilities' rounding and the order of the sums.
std::vector<float> RefOverRoundedQuery(const AttentionArgs& a) {
  std::vector<float> rounded(a.q, a.q + a.num_heads * a.qk_dim);
  for (float& v : rounded) v = RoundToBF16(v);
  std::vector<float> want(a.num_heads * a.v_dim);
  AttentionArgs r = a;
  r.q = rounded.data();
  r.bf16_products = false;
  r.out = want.data();
  Ref().attention(r);
  return want;
}

// attention under bf16_products, over bf16 rows with one shared head (MLA's absorbed decode): on
// AVX-512 with AVX512_BF16, the reference over the bf16-rounded query within what rounding the
// probabilities to bf16 can move (2^-9 of max |v|); bit for bit on 1 and 2 threads, and across
// lengths that take one segment or several. Elsewhere, and over per-head rows, the flag changes
// nothing, bit for bit.
TEST_P(FastKernels, AttentionBf16ProductsOverSharedBf16Rows) {
  LATENT_REQUIRE_TABLE(fast);
  ThreadCount restore;
  const bool can = GetParam().name == std::string("avx512") && Avx512HasBf16Dot();
  std::mt19937 rng(33);
  struct Case {
    int64_t heads, qk_dim, v_dim, length;
  };
  for (const Case& c : {Case{16, 576, 512, 1}, Case{16, 576, 512, 130}, Case{7, 40, 24, 65},
                        Case{9, 576, 512, 700}, Case{3, 33, 17, 1200}}) {
    std::vector<uint16_t> rows(c.length * c.qk_dim);  // bf16 rows: key, the value its first v_dim
    for (uint16_t& v : rows) v = F32ToBF16(std::uniform_real_distribution<float>(-1, 1)(rng));
    std::vector<const void*> row_ptrs(c.length);
    for (int64_t t = 0; t < c.length; ++t) row_ptrs[t] = &rows[t * c.qk_dim];
    const std::vector<float> q = RandomFloats(rng, c.heads * c.qk_dim, -1.0f, 1.0f);
    std::vector<float> scratch;
    AttentionArgs a = SharedBf16Rows(q, c.heads, c.qk_dim, c.v_dim, row_ptrs, scratch);
    const int64_t out_size = c.heads * c.v_dim;
    std::vector<float> f32(out_size, NAN), got(out_size, NAN), again(out_size, NAN);
    threads::SetNumThreads(2);
    a.out = f32.data();
    fast.attention(a);
    a.bf16_products = true;
    a.out = got.data();
    fast.attention(a);
    const std::string what = "H=" + std::to_string(c.heads) + " d=" + std::to_string(c.qk_dim) +
                             " L=" + std::to_string(c.length);
    if (!can) {
      ASSERT_EQ(0, std::memcmp(f32.data(), got.data(), sizeof(float) * out_size)) << what;
      continue;
    }
    const std::vector<float> want = RefOverRoundedQuery(a);
    for (int64_t j = 0; j < out_size; ++j) ASSERT_NEAR(got[j], want[j], 3e-3) << what << " " << j;
    if (c.length > 1) {
      EXPECT_NE(0, std::memcmp(f32.data(), got.data(), sizeof(float) * out_size)) << what;
    }
    threads::SetNumThreads(1);
    a.out = again.data();
    fast.attention(a);
    ASSERT_EQ(0, std::memcmp(got.data(), again.data(), sizeof(float) * out_size)) << what;
  }
  // Per-head rows keep the f32 products.
  const int64_t heads = 4, dim = 16, length = 9;
  std::vector<uint16_t> rows(length * heads * dim);
  for (uint16_t& v : rows) v = F32ToBF16(std::uniform_real_distribution<float>(-1, 1)(rng));
  std::vector<const void*> row_ptrs(length);
  for (int64_t t = 0; t < length; ++t) row_ptrs[t] = &rows[t * heads * dim];
  const std::vector<float> q = RandomFloats(rng, heads * dim);
  std::vector<float> scratch(length + 1), plain(heads * dim), flagged(heads * dim);
  AttentionArgs a;
  a.q = q.data();
  a.num_heads = heads;
  a.qk_dim = dim;
  a.rows = RowFormat(DType::kBF16);
  a.keys = row_ptrs.data();
  a.key_head_stride = dim;
  a.values = row_ptrs.data();
  a.value_head_stride = dim;
  a.v_dim = dim;
  a.length = length;
  a.scratch = scratch.data();
  a.out = plain.data();
  fast.attention(a);
  a.bf16_products = true;
  a.out = flagged.data();
  fast.attention(a);
  EXPECT_EQ(plain, flagged);
}

// The AMX table's attention under bf16 products over shared bf16 rows (MLA's absorbed decode):
// TDPBF16PS with the heads as tile rows where AmxTakesAttention (value dims of whole 16-column
// tiles), the vdpbf16ps kernel otherwise, bit for bit. Near the reference over the rounded query;
// bit for bit on 1 and 2 threads, over one segment or several, and whether the rows lie at one
// stride (key tiles read in place: packed, or with a gap between rows as a cache's blocks hold
// them) or scattered (staged): 2 head groups, a padded last group, dims short of a whole tile,
// value dims ending in half a 32-column step, blocks cut short; every other case with sinks.
TEST(AmxAttention, DecodeRunsOnTilesNearRefWhereverTheRowsLie) {
  if (AmxKernels() == nullptr) GTEST_SKIP() << "no AMX-BF16 (or no OS tile state) here";
  ThreadCount restore;
  const KernelTable& amx = *AmxKernels();
  std::mt19937 rng(34);
  struct Case {
    int64_t heads, qk_dim, v_dim, length;
  };
  int index = 0;
  for (const Case& c : {Case{16, 576, 512, 1}, Case{16, 576, 512, 130}, Case{9, 576, 512, 700},
                        Case{20, 64, 32, 1200}, Case{3, 33, 16, 65}, Case{16, 576, 512, 3000},
                        Case{4, 64, 48, 300}, Case{7, 40, 24, 65}}) {
    const bool with_sinks = index++ % 2 == 1;
    const std::string what = "H=" + std::to_string(c.heads) + " d=" + std::to_string(c.qk_dim) +
                             " dv=" + std::to_string(c.v_dim) + " L=" + std::to_string(c.length);
    std::vector<uint16_t> rows(c.length * c.qk_dim);  // bf16 rows: key, the value its first v_dim
    for (uint16_t& v : rows) v = F32ToBF16(std::uniform_real_distribution<float>(-1, 1)(rng));
    std::vector<const void*> row_ptrs(c.length);
    for (int64_t t = 0; t < c.length; ++t) row_ptrs[t] = &rows[t * c.qk_dim];
    // The same rows in order with a gap of 32 values between them, and scattered: stored in
    // shuffled order, a gap of one value between them.
    std::vector<uint16_t> gapped(c.length * (c.qk_dim + 32));
    std::vector<const void*> gapped_ptrs(c.length);
    for (int64_t t = 0; t < c.length; ++t) {
      std::copy(&rows[t * c.qk_dim], &rows[(t + 1) * c.qk_dim], &gapped[t * (c.qk_dim + 32)]);
      gapped_ptrs[t] = &gapped[t * (c.qk_dim + 32)];
    }
    std::vector<int64_t> order(c.length);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<uint16_t> scattered(c.length * (c.qk_dim + 1));
    std::vector<const void*> scattered_ptrs(c.length);
    for (int64_t t = 0; t < c.length; ++t) {
      uint16_t* at = &scattered[order[t] * (c.qk_dim + 1)];
      std::copy(&rows[t * c.qk_dim], &rows[(t + 1) * c.qk_dim], at);
      scattered_ptrs[t] = at;
    }
    const std::vector<float> q = RandomFloats(rng, c.heads * c.qk_dim, -1.0f, 1.0f);
    std::vector<float> scratch;
    AttentionArgs a = SharedBf16Rows(q, c.heads, c.qk_dim, c.v_dim, row_ptrs, scratch);
    a.bf16_products = true;
    const std::vector<float> sinks = RandomFloats(rng, c.heads, -1.0f, 3.0f);
    if (with_sinks) a.sinks = sinks.data();
    const bool tiles = c.v_dim % 16 == 0;
    ASSERT_EQ(amx::AmxTakesAttention(a), tiles) << what;
    const int64_t out_size = c.heads * c.v_dim;
    std::vector<float> got(out_size, NAN), other(out_size, NAN);
    threads::SetNumThreads(2);
    a.out = got.data();
    amx.attention(a);
    a.out = other.data();
    if (tiles) {
      amx::AttentionBf16Amx(a);
    } else {
      Avx512Kernels()->attention(a);
    }
    ASSERT_EQ(0, std::memcmp(got.data(), other.data(), sizeof(float) * out_size))
        << what << ": the table must run " << (tiles ? "the AMX kernel" : "the AVX-512 one");
    const std::vector<float> want = RefOverRoundedQuery(a);
    // Probabilities rounded to bf16 move sum_t p_t v_t by at most 2^-9 max |v| (|v| <= 1).
    for (int64_t j = 0; j < out_size; ++j) ASSERT_NEAR(got[j], want[j], 3e-3) << what << " " << j;
    for (const int threads : {1, 2}) {
      threads::SetNumThreads(threads);
      const std::vector<const void*>* layouts[] = {&row_ptrs, &gapped_ptrs, &scattered_ptrs};
      for (int layout = 0; layout < 3; ++layout) {  // packed, gapped, scattered
        AttentionArgs b = a;
        b.keys = b.values = layouts[layout]->data();
        std::vector<float> again(out_size, NAN);
        b.out = again.data();
        amx.attention(b);
        ASSERT_EQ(0, std::memcmp(got.data(), again.data(), sizeof(float) * out_size))
            << what << " threads " << threads << " layout " << layout;
      }
    }
  }
}

// Keys whose score is -inf weigh 0 in the AMX decode attention too, also when a whole first block
// (64 rows) scores -inf (its running max still -inf): the output is the finite keys' one value,
// over one segment and several.
TEST(AmxAttention, DecodeWeighsMinusInfScoresZero) {
  if (AmxKernels() == nullptr) GTEST_SKIP() << "no AMX-BF16 (or no OS tile state) here";
  ThreadCount restore;
  threads::SetNumThreads(2);
  for (const int64_t length : {65, 100, 600, 1100}) {
    // 2 heads, qk 32, v 16: keys 0..63 and 512..575 score -inf (element 3 is -inf), the rest 0.5
    // everywhere; every value row is (1, 2, .., 16) followed by the key's other elements.
    const int64_t qk = 32, dv = 16;
    std::vector<uint16_t> rows(length * qk, F32ToBF16(0.5f));
    for (int64_t t = 0; t < length; ++t) {
      for (int64_t c = 0; c < dv; ++c) rows[t * qk + c] = F32ToBF16(static_cast<float>(c + 1));
      if (t < 64 || (t >= 512 && t < 576)) rows[t * qk + 20] = F32ToBF16(-INFINITY);
    }
    std::vector<const void*> ptrs(length);
    for (int64_t t = 0; t < length; ++t) ptrs[t] = &rows[t * qk];
    std::vector<float> q(2 * qk, 0.0f);
    q[20] = q[qk + 20] = 1.0f;  // each head reads element 20 alone
    std::vector<float> out(2 * dv, NAN), scratch(length);
    AttentionArgs a;
    a.q = q.data();
    a.num_heads = 2;
    a.qk_dim = qk;
    a.rows = RowFormat(DType::kBF16);
    a.bf16_products = true;
    a.keys = a.values = ptrs.data();
    a.v_dim = dv;
    a.length = length;
    a.scale = 1.0f;
    a.out = out.data();
    a.scratch = scratch.data();
    ASSERT_TRUE(amx::AmxTakesAttention(a));
    AmxKernels()->attention(a);
    for (int64_t c = 0; c < 2 * dv; ++c) {
      EXPECT_EQ(out[c], static_cast<float>(c % dv + 1)) << "length " << length << " " << c;
    }
  }
}

// The reference's scores of a with its query rounded to bf16: what bf16 products compute but for
// the order of the sums.
std::vector<float> IndexRefOverRoundedQuery(const IndexScoreArgs& a) {
  std::vector<float> rounded(a.q, a.q + a.heads * a.dim), want(a.n);
  for (float& v : rounded) v = RoundToBF16(v);
  IndexScoreArgs r = a;
  r.q = rounded.data();
  r.bf16_products = false;
  r.scores = want.data();
  Ref().index_scores(r);
  return want;
}

// The f32-row case of the bf16-products tests: 5 f32 keys of dim 8, 16 heads, the flag set.
struct F32IndexCase {
  std::vector<float> q, w, keys;
  std::vector<const void*> key_rows;
  IndexScoreArgs args;
  F32IndexCase(const F32IndexCase&) = delete;  // args points into this object's vectors
  explicit F32IndexCase(std::mt19937& rng)
      : q(RandomFloats(rng, 16 * 8)), w(RandomFloats(rng, 16)), keys(RandomFloats(rng, 5 * 8)) {
    for (int64_t j = 0; j < 5; ++j) key_rows.push_back(&keys[j * 8]);
    args = IndexArgs(q, w, 16, 8, key_rows, DType::kF32);
    args.bf16_products = true;
  }
};

// The AMX table's index_scores under bf16 products over bf16 key rows of an even dim: TDPBF16PS
// (16 keys x 16 heads a tile), bit for bit the kernel AmxTakesIndexScores names; near the
// reference over the rounded query; each key's score bit-identical in any run (runs starting mid
// tile, single keys) and whether the keys lie at one stride (read in place: in order, or reversed
// with a gap) or shuffled (staged). Heads of 1 to 9 groups of 16 (passes of 1 to 4 groups, the
// last padded), dims of whole tiles and not; odd dims and f32 rows go to the AVX-512 table's
// kernel, bit for bit.
TEST(AmxIndexScores, KeysRunOnTilesNearRefInAnyRunWhereverTheyLie) {
  if (AmxKernels() == nullptr) GTEST_SKIP() << "no AMX-BF16 (or no OS tile state) here";
  const KernelTable& amx = *AmxKernels();
  std::mt19937 rng(35);
  for (const int64_t heads : {64, 7, 17, 130, 48}) {
    for (const int64_t dim : {128, 6, 64, 33}) {
      const int64_t n = 41;
      const std::string what = "heads=" + std::to_string(heads) + " dim=" + std::to_string(dim);
      const std::vector<float> q = RandomFloats(rng, heads * dim, -1.0f, 1.0f);
      const std::vector<float> w = RandomFloats(rng, heads, -1.0f, 1.0f);
      std::vector<uint16_t> keys(n * dim);  // bf16 rows, one after the other
      for (uint16_t& k : keys) k = F32ToBF16(std::uniform_real_distribution<float>(-1, 1)(rng));
      std::vector<const void*> key_rows(n), reversed_rows(n), shuffled_rows(n);
      std::vector<uint16_t> reversed(n * (dim + 3)), shuffled(n * (dim + 3));
      std::vector<int64_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      for (int64_t j = 0; j < n; ++j) {
        key_rows[j] = &keys[j * dim];
        uint16_t* at = &reversed[(n - 1 - j) * (dim + 3)];  // one negative stride
        std::copy(&keys[j * dim], &keys[(j + 1) * dim], at);
        reversed_rows[j] = at;
        at = &shuffled[order[j] * (dim + 3)];
        std::copy(&keys[j * dim], &keys[(j + 1) * dim], at);
        shuffled_rows[j] = at;
      }
      IndexScoreArgs a = IndexArgs(q, w, heads, dim, key_rows, DType::kBF16);
      a.bf16_products = true;
      const bool tiles = dim % 2 == 0;
      ASSERT_EQ(amx::AmxTakesIndexScores(a), tiles) << what;
      std::vector<float> got(n, NAN), other(n, NAN);
      a.scores = got.data();
      amx.index_scores(a);
      a.scores = other.data();
      if (tiles) {
        amx::IndexScoresBf16Amx(a);
      } else {
        Avx512Kernels()->index_scores(a);
      }
      ASSERT_EQ(0, std::memcmp(got.data(), other.data(), sizeof(float) * n)) << what;
      if (!tiles) continue;
      const std::vector<float> want = IndexRefOverRoundedQuery(a);
      for (int64_t j = 0; j < n; ++j)
        ASSERT_NEAR(got[j], want[j], 1.2e-7 * heads * dim * a.scale) << what << " key " << j;
      const std::vector<const void*>* layouts[] = {&key_rows, &reversed_rows, &shuffled_rows};
      for (int layout = 0; layout < 3; ++layout) {  // in order, reversed, shuffled
        for (int64_t j0 : {0, 1, 3, 7, 16, 25, 40}) {  // runs starting mid tile, single keys
          std::vector<float> part(n - j0, NAN);
          a.keys = layouts[layout]->data() + j0;
          a.n = n - j0;
          a.scores = part.data();
          amx.index_scores(a);
          ASSERT_EQ(0, std::memcmp(part.data(), got.data() + j0, sizeof(float) * part.size()))
              << what << " from key " << j0 << " layout " << layout;
        }
      }
    }
  }
  // f32 rows keep the AVX-512 table's f32 products.
  F32IndexCase f32_case(rng);
  IndexScoreArgs& f = f32_case.args;
  EXPECT_FALSE(amx::AmxTakesIndexScores(f));
  std::vector<float> on_amx(f.n, NAN), on_avx512(f.n, NAN);
  f.scores = on_amx.data();
  amx.index_scores(f);
  f.scores = on_avx512.data();
  Avx512Kernels()->index_scores(f);
  EXPECT_EQ(0, std::memcmp(on_amx.data(), on_avx512.data(), sizeof(float) * f.n));
  // relu(NaN) = 0 on tiles too: the key with a NaN element scores 0 in every head.
  const std::vector<float> nan_q = {0.5f, 0.5f, -0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f,
                                    0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<float> ones = {1.0f, 1.0f, 1.0f};
  std::vector<uint16_t> nan_keys;
  for (float v : {1.0f, 1.0f, NAN, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}) nan_keys.push_back(F32ToBF16(v));
  const std::vector<const void*> nan_rows = {&nan_keys[0], &nan_keys[4]};
  std::vector<float> scores(2, -1.0f);
  IndexScoreArgs b = IndexArgs(nan_q, ones, 3, 4, nan_rows, DType::kBF16);
  b.scale = 0.5f;
  b.scores = scores.data();
  b.bf16_products = true;
  ASSERT_TRUE(amx::AmxTakesIndexScores(b));
  amx.index_scores(b);
  EXPECT_EQ(scores[0], 0.0f);
  EXPECT_EQ(scores[1], 2.5f);  // relu(0.5 x 1) + 2 relu(0.5 x 2)
}

// index_scores under bf16_products: over bf16 key rows of an even dim, on AVX-512 with
// AVX512_BF16, the reference over the bf16-rounded query (the products are then exact, only the
// order of the sums differs: the bound above); each key's score bit-identical alone or in any
// run. Everywhere else (odd dims, f32 rows, other tables) the flag changes nothing, bit for bit.
TEST_P(FastKernels, IndexScoresBf16ProductsRoundTheQueryOnlyWhereTheCpuCan) {
  LATENT_REQUIRE_TABLE(fast);
  const bool can = GetParam().name == std::string("avx512") && Avx512HasBf16Dot();
  std::mt19937 rng(32);
  for (const int64_t heads : {64, 7, 17, 130}) {
    for (const int64_t dim : {128, 6, 33}) {
      const int64_t n = 41;
      const std::vector<float> q = RandomFloats(rng, heads * dim, -1.0f, 1.0f);
      const std::vector<float> w = RandomFloats(rng, heads, -1.0f, 1.0f);
      std::vector<uint16_t> keys(n * dim);  // bf16 rows
      for (uint16_t& k : keys) k = F32ToBF16(std::uniform_real_distribution<float>(-1, 1)(rng));
      std::vector<const void*> key_rows(n);  // [n] -> key j
      for (int64_t j = 0; j < n; ++j) key_rows[j] = &keys[j * dim];
      IndexScoreArgs a = IndexArgs(q, w, heads, dim, key_rows, DType::kBF16);
      std::vector<float> f32(n, NAN), got(n, NAN);
      a.scores = f32.data();
      fast.index_scores(a);
      a.bf16_products = true;
      a.scores = got.data();
      fast.index_scores(a);
      const std::string what = "heads=" + std::to_string(heads) + " dim=" + std::to_string(dim);
      if (!can || dim % 2 != 0) {
        ASSERT_EQ(0, std::memcmp(f32.data(), got.data(), sizeof(float) * n)) << what;
        continue;
      }
      const std::vector<float> want = IndexRefOverRoundedQuery(a);
      for (int64_t j = 0; j < n; ++j)
        ASSERT_NEAR(got[j], want[j], 1.2e-7 * heads * dim * a.scale) << what << " key " << j;
      EXPECT_NE(0, std::memcmp(f32.data(), got.data(), sizeof(float) * n))
          << what << ": the query was not rounded";
      for (int64_t j0 : {0, 1, 3, 7, 40}) {  // runs starting mid-tile, and single keys
        std::vector<float> part(n - j0, NAN);
        a.keys = key_rows.data() + j0;
        a.n = n - j0;
        a.scores = part.data();
        fast.index_scores(a);
        ASSERT_EQ(0, std::memcmp(part.data(), got.data() + j0, sizeof(float) * part.size()))
            << what << " from key " << j0;
      }
    }
  }
  // f32 rows keep the f32 products.
  F32IndexCase f32_case(rng);
  IndexScoreArgs& a = f32_case.args;
  std::vector<float> plain(a.n), flagged(a.n);
  a.bf16_products = false;
  a.scores = plain.data();
  fast.index_scores(a);
  a.bf16_products = true;
  a.scores = flagged.data();
  fast.index_scores(a);
  EXPECT_EQ(plain, flagged);
}

}  // namespace
}  // namespace latent::kernels
