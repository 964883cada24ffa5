// The emulated intrinsics (kernels/emulation/) on the cases where a plausible emulation and the
// hardware part ways: Intel's rounding of f32 into bf16 (denormals to zero, NaN kept), the order
// and flushing of vdpbf16ps's two products and of TDPBF16PS's even and odd sums, masked loads
// that must not touch the memory of the lanes left out, aligned loads that fault off alignment,
// vscalefps's range, vcvtps2dq's ties and out-of-range lanes, and the AMX tile state's checks.
// The kernels' own tests (the rest of latent_kernel_tests_emulated) then hold the kernels to the
// reference on top of these. Compiled with the emulated library's flags (tests/kernels/
// CMakeLists.txt), so the helpers inlined here are the library's.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "kernels/avx512/intrinsics.h"

namespace latent::kernels::emulated {
namespace {

// LDTILECFG's 64-byte operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Clears MXCSR's FTZ and DAZ for a test's lifetime: the flushing checked below must come from the
// emulation, not from a mode an earlier test in the process left on (threads::FlushDenormals).
class NoDenormalModes {
 public:
  NoDenormalModes() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~0x8040u); }
  ~NoDenormalModes() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
};

TEST(EmulatedIntrinsics, RoundingToBf16FollowsIntel) {
  // The low 16 results come from the second operand, the high 16 from the first.
  std::array<float, 16> lo{}, hi{};
  lo[0] = 1.0f;
  lo[1] = BitsToF32(0x3f808000u);   // a tie, even below: stays 0x3f80
  lo[2] = BitsToF32(0x3f818000u);   // a tie, odd below: rounds up to 0x3f82
  lo[3] = BitsToF32(0x3f808001u);   // above the tie: 0x3f81
  lo[4] = BitsToF32(0x00000001u);   // the smallest denormal: +0 (DAZ)
  lo[5] = BitsToF32(0x807fffffu);   // the largest negative denormal: -0
  lo[6] = BitsToF32(0x7f800001u);   // a signalling NaN: quieted, still NaN
  lo[7] = std::numeric_limits<float>::infinity();
  lo[8] = BitsToF32(0x7f7fffffu);   // the largest float rounds up to infinity
  hi[0] = -2.0f;
  const auto out =
      Lanes<uint16_t>(_mm512_cvtne2ps_pbh(FromLanes<__m512>(hi), FromLanes<__m512>(lo)));
  EXPECT_EQ(out[0], 0x3f80);
  EXPECT_EQ(out[1], 0x3f80);
  EXPECT_EQ(out[2], 0x3f82);
  EXPECT_EQ(out[3], 0x3f81);
  EXPECT_EQ(out[4], 0x0000);
  EXPECT_EQ(out[5], 0x8000);
  EXPECT_EQ(out[6], 0x7fc0);
  EXPECT_EQ(out[7], 0x7f80);
  EXPECT_EQ(out[8], 0x7f80);
  EXPECT_EQ(out[16], 0xc000);
  const auto one = Lanes<uint16_t>(_mm512_cvtneps_pbh(FromLanes<__m512>(lo)));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(one[i], out[i]) << i;
}

TEST(EmulatedIntrinsics, DotOfBf16PairsAddsTheOddProductFirstAndFlushesDenormals) {
  NoDenormalModes modes;
  std::array<float, 16> acc{};
  std::array<uint16_t, 32> x{}, w{};
  // Lane 0: 1 + 2^-24 (odd pair, 2^-12 * 2^-12) rounds to 1, then - 1 gives 0; the other order
  // would give 2^-24.
  acc[0] = 1.0f;
  x[1] = 0x3980, w[1] = 0x3980;  // 2^-12 each
  x[0] = 0xbf80, w[0] = 0x3f80;  // -1 * 1
  // Lane 1: a denormal bf16 input reads as zero.
  acc[1] = 3.0f;
  x[2] = 0x0001, w[2] = 0x7f00;  // denormal * 2^127
  // Lane 2: a product below the f32 normal range is flushed: 2^-70 * 2^-70 + 0 -> 0.
  x[4] = 0x1c80, w[4] = 0x1c80;
  const auto r = Lanes<float>(_mm512_dpbf16_ps(FromLanes<__m512>(acc), FromLanes<__m512bh>(x),
                                               FromLanes<__m512bh>(w)));
  EXPECT_EQ(r[0], 0.0f);
  EXPECT_EQ(r[1], 3.0f);
  EXPECT_EQ(F32ToBits(r[2]), 0u);
}

TEST(EmulatedIntrinsics, MaskedLoadsNeverTouchTheLanesLeftOut) {
  // Data at the end of a page whose next page is inaccessible: a masked load of the lanes inside
  // the page must not fault, as it does not on hardware.
  const long page = sysconf(_SC_PAGESIZE);
  void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<char*>(mem) + page, page, PROT_NONE), 0);
  float* end = reinterpret_cast<float*>(static_cast<char*>(mem) + page);
  for (int i = 1; i <= 5; ++i) end[-i] = static_cast<float>(i);
  const auto f = Lanes<float>(_mm512_maskz_loadu_ps(0x1f, end - 5));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f[i], static_cast<float>(5 - i));
  for (int i = 5; i < 16; ++i) EXPECT_EQ(f[i], 0.0f);
  const auto kept = Lanes<float>(_mm512_mask_loadu_ps(_mm512_set1_ps(7.0f), 0x3, end - 2));
  EXPECT_EQ(kept[1], 1.0f);
  EXPECT_EQ(kept[2], 7.0f);
  const auto bytes = Lanes<int8_t>(_mm_maskz_loadu_epi8(0x7, reinterpret_cast<int8_t*>(end) - 3));
  EXPECT_EQ(bytes[3], 0);
  _mm512_mask_storeu_ps(end - 1, 0x1, _mm512_set1_ps(9.0f));
  EXPECT_EQ(end[-1], 9.0f);
  munmap(mem, 2 * page);
}

TEST(EmulatedIntrinsics, ConversionToInt32RoundsTiesToEvenAndMarksOutOfRange) {
  std::array<float, 16> v{};
  v[0] = 2.5f, v[1] = 3.5f, v[2] = -2.5f, v[3] = 3e9f;
  v[4] = std::numeric_limits<float>::quiet_NaN();
  const auto r = Lanes<int32_t>(_mm512_cvtps_epi32(FromLanes<__m512>(v)));
  EXPECT_EQ(r[0], 2);
  EXPECT_EQ(r[1], 4);
  EXPECT_EQ(r[2], -2);
  EXPECT_EQ(r[3], INT32_MIN);
  EXPECT_EQ(r[4], INT32_MIN);
}

TEST(EmulatedIntrinsics, AlignedLoadsAndStoresFaultOffAlignment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // earlier tests may have started threads
  alignas(64) float buffer[32] = {};
  EXPECT_EQ(Lanes<float>(_mm512_load_ps(buffer))[0], 0.0f);
  EXPECT_DEATH(_mm512_load_ps(buffer + 4), "not 64-byte aligned");
  EXPECT_DEATH(_mm512_store_si512(buffer + 8, _mm512_setzero_si512()), "not 64-byte aligned");
}

TEST(EmulatedIntrinsics, ScalefUsesTheWholeExponentRange) {
  NoDenormalModes modes;
  std::array<float, 16> a{}, b{};
  a[0] = 0.75f, b[0] = 128.0f;    // 1.5 * 2^127: finite, though 2^128 alone is not
  a[1] = 0.0f, b[1] = 200.0f;     // 0, not 0 * inf
  a[2] = 1.0f, b[2] = 2.7f;       // floor: 4
  a[3] = 1.0f, b[3] = -140.0f;    // a denormal result (FTZ off)
  a[4] = 0.0f, b[4] = std::numeric_limits<float>::infinity();  // NaN
  a[5] = 3.0f, b[5] = -std::numeric_limits<float>::infinity();  // +0
  const auto r = Lanes<float>(_mm512_scalef_ps(FromLanes<__m512>(a), FromLanes<__m512>(b)));
  EXPECT_EQ(r[0], std::ldexp(1.5f, 127));
  EXPECT_EQ(r[1], 0.0f);
  EXPECT_EQ(r[2], 4.0f);
  EXPECT_EQ(r[3], std::ldexp(1.0f, -140));
  EXPECT_TRUE(std::isnan(r[4]));
  EXPECT_EQ(F32ToBits(r[5]), 0u);
}

TEST(EmulatedIntrinsics, TileDotSumsTheEvenAndOddProductsApartThenAddsThem) {
  NoDenormalModes modes;
  TileConfig c;
  c.colsb[0] = 4, c.rows[0] = 1;  // C 1 x 1, A 1 x 1 pair, B 1 pair x 1
  c.colsb[1] = 4, c.rows[1] = 1;
  c.colsb[2] = 4, c.rows[2] = 1;
  _tile_loadconfig(&c);
  // 2^-24 + 2^-24 = 2^-23 first, then 1 + 2^-23 is exact; adding each product to 1 in turn
  // would round both away.
  const float one = 1.0f;
  const uint16_t x[2] = {0x3980, 0x3980}, w[2] = {0x3980, 0x3980};  // 2^-12 each
  _tile_loadd(0, &one, 4);
  _tile_loadd(1, x, 4);
  _tile_loadd(2, w, 4);
  _tile_dpbf16ps(0, 1, 2);
  float out = 0;
  _tile_stored(0, &out, 4);
  EXPECT_EQ(out, 1.0f + std::ldexp(1.0f, -23));
  EXPECT_THROW(_tile_dpbf16ps(0, 0, 2), std::logic_error);  // one tile as two operands
  _tile_release();
}

TEST(EmulatedIntrinsics, TilesMultiplyBf16PairsAndCheckTheirShapes) {
  TileConfig c;
  // C 2 x 16 f32, A 2 rows x 2 k-pairs, B 2 k-pairs x 16 pairs.
  c.colsb[0] = 64, c.rows[0] = 2;
  c.colsb[1] = 8, c.rows[1] = 2;
  c.colsb[2] = 64, c.rows[2] = 2;
  EXPECT_THROW(_tile_zero(0), std::logic_error);  // before LDTILECFG
  _tile_loadconfig(&c);
  uint16_t a[2][4] = {{0x3f80, 0x4000, 0x4040, 0x4080}, {0, 0, 0x3f80, 0}};  // 1 2 3 4 / 0 0 1 0
  uint16_t b[2][32];
  for (int n = 0; n < 32; ++n) b[0][n] = 0x3f80, b[1][n] = 0x4000;  // ones, then twos
  _tile_zero(0);
  _tile_loadd(1, a, sizeof(a[0]));
  _tile_loadd(2, b, sizeof(b[0]));
  _tile_dpbf16ps(0, 1, 2);
  float out[2][16];
  _tile_stored(0, out, sizeof(out[0]));
  for (int n = 0; n < 16; ++n) {
    EXPECT_EQ(out[0][n], 1 + 2 + 2 * (3 + 4)) << n;
    EXPECT_EQ(out[1][n], 2.0f) << n;
  }
  EXPECT_THROW(_tile_dpbf16ps(0, 2, 1), std::logic_error);  // A's k-pairs are not B's rows
  EXPECT_THROW(_tile_zero(3), std::logic_error);  // left empty by the configuration
  _tile_loadconfig(&c);  // a new configuration zeroes the tiles
  _tile_stored(0, out, sizeof(out[0]));
  EXPECT_EQ(out[0][0], 0.0f);
  c.palette = 0;  // palette 0: release
  _tile_loadconfig(&c);
  EXPECT_THROW(_tile_zero(0), std::logic_error);
}

// TDPBUSD: unsigned activation bytes times signed weight bytes, four of k per int32 lane, added
// to the accumulator, with the int32 wrap at the ends of the range.
TEST(EmulatedIntrinsics, TileIntegerDotTakesUnsignedTimesSignedQuadsAndWraps) {
  TileConfig c;
  // C 2 x 16 int32, A 2 rows x 2 k-quads, B 2 k-quads x 16 quads.
  c.colsb[0] = 64, c.rows[0] = 2;
  c.colsb[1] = 8, c.rows[1] = 2;
  c.colsb[2] = 64, c.rows[2] = 2;
  _tile_loadconfig(&c);
  const uint8_t a[2][8] = {{255, 1, 2, 3, 4, 5, 6, 7}, {1, 0, 0, 0, 255, 255, 255, 255}};
  int8_t b[2][64];
  for (int i = 0; i < 64; ++i) b[0][i] = static_cast<int8_t>(i % 4 == 0 ? -128 : 1), b[1][i] = 2;
  int32_t acc[2][16];
  for (int n = 0; n < 16; ++n) acc[0][n] = n, acc[1][n] = std::numeric_limits<int32_t>::max();
  _tile_loadd(0, acc, sizeof(acc[0]));
  _tile_loadd(1, a, sizeof(a[0]));
  _tile_loadd(2, b, sizeof(b[0]));
  _tile_dpbusd(0, 1, 2);
  int32_t out[2][16];
  _tile_stored(0, out, sizeof(out[0]));
  for (int n = 0; n < 16; ++n) {
    // 255 is +255 (unsigned), -128 is -128 (signed).
    EXPECT_EQ(out[0][n], n + 255 * -128 + 1 + 2 + 3 + 2 * (4 + 5 + 6 + 7)) << n;
    // max + (-128 + 255 * 2 * 4) wraps to the bottom of the range, as the hardware's sum does.
    EXPECT_EQ(out[1][n], std::numeric_limits<int32_t>::min() + (-128 + 2040 - 1)) << n;
  }
  EXPECT_THROW(_tile_dpbusd(0, 2, 1), std::logic_error);  // A's k-quads are not B's rows
  EXPECT_THROW(_tile_dpbusd(1, 1, 2), std::logic_error);  // one tile as two operands
  _tile_release();
}

}  // namespace
}  // namespace latent::kernels::emulated
