#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace latent {
namespace {

TEST(DTypeTest, SizesAndNamesRoundTrip) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E8M0,
                  DType::kI8, DType::kU8, DType::kI32, DType::kI64, DType::kBool}) {
    auto parsed = ParseSafetensorsDType(DTypeName(d));
    ASSERT_TRUE(parsed.has_value()) << DTypeName(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_FALSE(ParseSafetensorsDType("F64").has_value());
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway too; the even neighbour is 1 + 2^-6.
  EXPECT_EQ(F32ToBF16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::nanf("")))));
}

TEST(DTypeTest, Fp8E4M3DecodesKnownValues) {
  EXPECT_EQ(F8E4M3ToF32(0x00), 0.0f);
  EXPECT_EQ(F8E4M3ToF32(0x38), 1.0f);    // exponent 7 (bias), mantissa 0
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);  // the largest finite value
  EXPECT_EQ(F8E4M3ToF32(0xfe), -448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7f)));
}

TEST(DTypeTest, F16AndE8M0Decode) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00)));
  EXPECT_EQ(F8E8M0ToF32(127), 1.0f);
  EXPECT_EQ(F8E8M0ToF32(130), 8.0f);
}

}  // namespace
}  // namespace latent
