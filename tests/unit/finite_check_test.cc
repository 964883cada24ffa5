#include "weights/finite_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace latent::weights {
namespace {

TensorView View(const void* data, DType dtype, int64_t n) {
  Shape shape;
  shape.Append(n);
  return TensorView{data, dtype, shape};
}

TEST(FiniteCheck, F32FindsTheFirstAndCountsAll) {
  std::vector<float> w(10000, 0.5f);
  EXPECT_FALSE(FindNonFinite(View(w.data(), DType::kF32, 10000)));
  w[5000] = std::numeric_limits<float>::infinity();
  w[9999] = std::nanf("");
  w[7000] = -std::numeric_limits<float>::infinity();
  const auto bad = FindNonFinite(View(w.data(), DType::kF32, 10000));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->first_index, 5000);
  EXPECT_FALSE(bad->first_is_nan);
  EXPECT_EQ(bad->count, 3);
  // The largest finite value and the smallest denormal are fine.
  std::vector<float> edge = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                             std::numeric_limits<float>::denorm_min(), -0.0f};
  EXPECT_FALSE(FindNonFinite(View(edge.data(), DType::kF32, 4)));
}

TEST(FiniteCheck, HalfFormatsAndFp8) {
  // bf16: 0x7f7f is the largest finite value, 0x7f80 +inf, 0xffc0 a NaN.
  std::vector<uint16_t> bf16 = {0x3f80, 0x7f7f, 0xff7f, 0x0001, 0xffc0, 0x7f80};
  auto bad = FindNonFinite(View(bf16.data(), DType::kBF16, 6));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->first_index, 4);
  EXPECT_TRUE(bad->first_is_nan);
  EXPECT_EQ(bad->count, 2);
  // f16: 0x7bff is 65504 (finite), 0xfc00 -inf.
  std::vector<uint16_t> f16 = {0x7bff, 0x3c00, 0xfc00};
  bad = FindNonFinite(View(f16.data(), DType::kF16, 3));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->first_index, 2);
  EXPECT_FALSE(bad->first_is_nan);
  // e4m3fn: 0x7e is 448 (finite), 0x7f and 0xff are NaN.
  std::vector<uint8_t> fp8 = {0x7e, 0xfe, 0x78, 0x00, 0xff};
  bad = FindNonFinite(View(fp8.data(), DType::kF8E4M3, 5));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->first_index, 4);
  EXPECT_EQ(bad->count, 1);
  // e8m0: 0xfe is 2^127, 0xff NaN.
  std::vector<uint8_t> e8m0 = {0xfe, 0x7f, 0x00};
  EXPECT_FALSE(FindNonFinite(View(e8m0.data(), DType::kF8E8M0, 3)));
  // Integers have no NaN.
  std::vector<int32_t> ints = {-1, 0x7f800000};
  EXPECT_FALSE(FindNonFinite(View(ints.data(), DType::kI32, 2)));
}

TEST(FiniteCheck, ReadsUnalignedData) {
  std::vector<uint8_t> bytes(4 * 100 + 1, 0);
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(bytes.data() + 1 + 4 * 42, &inf, 4);
  const auto bad = FindNonFinite(View(bytes.data() + 1, DType::kF32, 100));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->first_index, 42);
}

}  // namespace
}  // namespace latent::weights
