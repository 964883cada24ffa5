// The fp8 cache rows (cache/fp8_rows.h): the scalar f32 <-> e4m3 conversions against a brute-force
// nearest-value search, the row encoding (FlashMLA's 656-byte layout for DeepSeek V3 dims), its
// edge cases (ties, saturation, NaN, infinity, zero rows), and the bytes the engine's cache
// reports for DeepSeek V3 and V3.2 dims. Runs in well under a second.
#include "cache/fp8_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/cache_manager.h"
#include "model/cache_rows.h"
#include "model/model_config.h"
#include "tensor/dtype.h"

namespace latent::cache {
namespace {

// The e4m3 code nearest to x, ties to the even code, by searching every finite code: the
// definition F32ToF8E4M3 implements with bit arithmetic (saturating at 448).
uint8_t NearestCode(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return sign | 0x7e;
  uint8_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {
    const double d = std::fabs(a - F8E4M3ToF32(static_cast<uint8_t>(c)));
    if (d < best_distance || (d == best_distance && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_distance = d;
    }
  }
  return sign | best;
}

TEST(Fp8E4M3, AllCodesRoundTrip) {
  for (int c = 0; c < 256; ++c) {
    const float v = F8E4M3ToF32(static_cast<uint8_t>(c));
    EXPECT_EQ(F32ToF8E4M3(v), c) << "code " << c << " value " << v;  // -0 and both NaNs too
  }
}

TEST(Fp8E4M3, RoundsToNearestEvenLikeTheBruteForceSearch) {
  // Every midpoint between neighbouring codes (the ties), and just off each side of it.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = F8E4M3ToF32(static_cast<uint8_t>(c)), hi = F8E4M3ToF32(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact in f32
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f), -mid}) {
      EXPECT_EQ(F32ToF8E4M3(x), NearestCode(x)) << "x " << x;
    }
    EXPECT_EQ(F32ToF8E4M3(mid), (c & 1) == 0 ? c : c + 1) << "tie between codes " << c << ", " << c + 1;
  }
  // Random values over the whole range, subnormals included.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-14.0f, 9.5f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(exponent(rng)) * (i % 2 ? -1.0f : 1.0f);
    ASSERT_EQ(F32ToF8E4M3(x), NearestCode(x)) << "x " << x;
  }
}

TEST(Fp8E4M3, KnownTiesSaturationAndNaN) {
  EXPECT_EQ(F32ToF8E4M3(1.0625f), 0x38);  // 1 + 1/16: halfway 1 and 1.125, even is 1
  EXPECT_EQ(F32ToF8E4M3(1.1875f), 0x3a);  // halfway 1.125 and 1.25, even is 1.25
  EXPECT_EQ(F32ToF8E4M3(std::ldexp(0.5f, -9)), 0x00);  // half the smallest subnormal: to 0
  EXPECT_EQ(F32ToF8E4M3(std::ldexp(1.5f, -9)), 0x02);
  EXPECT_EQ(F32ToF8E4M3(std::ldexp(7.5f, -9)), 0x08);  // up into the smallest normal, 2^-6
  EXPECT_EQ(F32ToF8E4M3(448.0f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(460.0f), 0x7e);   // saturates, never NaN
  EXPECT_EQ(F32ToF8E4M3(1e30f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(-1e30f), 0xfe);
  EXPECT_EQ(F32ToF8E4M3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(F32ToF8E4M3(std::nanf("")), 0x7f);
  EXPECT_EQ(F32ToF8E4M3(-std::nanf("")), 0xff);
  EXPECT_EQ(F32ToF8E4M3(1e-30f), 0x00);
  EXPECT_EQ(F32ToF8E4M3(-0.0f), 0x80);
}

// A DeepSeek V3 latent row: 512 latent values (4 groups of different magnitude) and 64 rotary.
std::vector<float> LatentRow(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(576);
  for (int i = 0; i < 576; ++i) row[i] = normal(rng) * (i < 512 ? std::ldexp(1.0f, 2 * (i / 128) - 3) : 3.0f);
  return row;
}

TEST(Fp8Rows, DeepseekV3LatentRowLayout) {
  EXPECT_EQ(Fp8RowBytes(576, 512), 656u);
  EXPECT_EQ(Fp8RowBytes(128, 128), 132u);
  const std::vector<float> row = LatentRow(1);
  std::vector<uint8_t> bytes(656);
  EncodeFp8Row(row.data(), 576, 512, bytes.data());
  for (int g = 0; g < 4; ++g) {
    float amax = 0, scale;
    for (int i = 128 * g; i < 128 * (g + 1); ++i) amax = std::max(amax, std::fabs(row[i]));
    std::memcpy(&scale, &bytes[512 + 4 * g], 4);
    EXPECT_EQ(scale, amax / 448.0f) << "group " << g;
    for (int i = 128 * g; i < 128 * (g + 1); ++i) {
      ASSERT_EQ(bytes[i], F32ToF8E4M3(row[i] / scale)) << "value " << i;
    }
  }
  for (int i = 0; i < 64; ++i) {
    uint16_t v;
    std::memcpy(&v, &bytes[528 + 2 * i], 2);
    EXPECT_EQ(v, F32ToBF16(row[512 + i])) << "rotary value " << i;
  }
  // Decoded: within half an e4m3 step of each value (<= amax / 16 at the top of the range),
  // the rotary key exactly its bf16.
  std::vector<float> back(576);
  DecodeFp8Row(bytes.data(), 576, 512, back.data());
  for (int g = 0; g < 4; ++g) {
    float amax = 0;
    for (int i = 128 * g; i < 128 * (g + 1); ++i) amax = std::max(amax, std::fabs(row[i]));
    for (int i = 128 * g; i < 128 * (g + 1); ++i) {
      const float scale = amax / 448.0f;
      EXPECT_EQ(back[i], F8E4M3ToF32(F32ToF8E4M3(row[i] / scale)) * scale);
      EXPECT_LE(std::fabs(back[i] - row[i]), amax / 16) << "value " << i;
    }
  }
  for (int i = 512; i < 576; ++i) EXPECT_EQ(back[i], RoundToBF16(row[i]));
}

TEST(Fp8Rows, PartialGroupsAndAllFp8Rows) {
  // 40 values, 36 of them fp8: one group of 36 (a tiny model's kv_lora_rank), then 4 bf16.
  std::vector<float> row(40);
  for (int i = 0; i < 40; ++i) row[i] = 0.37f * (i - 17);
  std::vector<uint8_t> bytes(Fp8RowBytes(40, 36));
  ASSERT_EQ(bytes.size(), 36u + 4 + 8);
  EncodeFp8Row(row.data(), 40, 36, bytes.data());
  std::vector<float> back(40);
  DecodeFp8Row(bytes.data(), 40, 36, back.data());
  const float amax = 0.37f * 18;  // the largest |value| among the first 36 (i = 35)
  for (int i = 0; i < 36; ++i) EXPECT_LE(std::fabs(back[i] - row[i]), amax / 16);
  for (int i = 36; i < 40; ++i) EXPECT_EQ(back[i], RoundToBF16(row[i]));
  // The amax itself comes back within one f32 rounding of the scale.
  EXPECT_NEAR(back[35], row[35], 1e-6f * amax);
  // An indexer key: every value fp8, 130 values -> two groups (128 and 2).
  std::vector<float> key(130);
  for (int i = 0; i < 130; ++i) key[i] = i < 128 ? 0.01f * i : 1000.0f * (i - 128.5f);
  std::vector<uint8_t> key_bytes(Fp8RowBytes(130, 130));
  ASSERT_EQ(key_bytes.size(), 130u + 8);
  EncodeFp8Row(key.data(), 130, 130, key_bytes.data());
  DecodeFp8Row(key_bytes.data(), 130, 130, key.data());
  // The second group's large values do not coarsen the first group's small ones.
  for (int i = 0; i < 128; ++i) EXPECT_LE(std::fabs(key[i] - 0.01f * i), 1.27f / 16);
  EXPECT_NEAR(key[128], -500.0f, 1e-4f);
  EXPECT_NEAR(key[129], 500.0f, 1e-4f);
}

TEST(Fp8Rows, ZeroRowsNaNAndInfinity) {
  std::vector<float> zeros(576, 0.0f), back(576, 1.0f);
  std::vector<uint8_t> bytes(656, 0xaa);
  EncodeFp8Row(zeros.data(), 576, 512, bytes.data());
  for (int i = 0; i < 656; ++i) ASSERT_EQ(bytes[i], 0) << "byte " << i;  // codes, scales 0
  DecodeFp8Row(bytes.data(), 576, 512, back.data());
  for (float v : back) ASSERT_EQ(v, 0.0f);

  // A NaN stays NaN; the rest of its group is scaled by the finite values' amax, as if the NaN
  // were 0.
  const std::vector<float> original = LatentRow(2);
  std::vector<float> row = original, zeroed = original, clean(576);
  row[5] = std::nanf("");
  zeroed[5] = 0.0f;
  EncodeFp8Row(row.data(), 576, 512, bytes.data());
  DecodeFp8Row(bytes.data(), 576, 512, back.data());
  std::vector<uint8_t> zeroed_bytes(656);
  EncodeFp8Row(zeroed.data(), 576, 512, zeroed_bytes.data());
  DecodeFp8Row(zeroed_bytes.data(), 576, 512, clean.data());
  EXPECT_TRUE(std::isnan(back[5]));
  for (int i = 0; i < 576; ++i) {
    if (i != 5) {
      ASSERT_EQ(back[i], clean[i]) << "value " << i;
    }
  }
  EncodeFp8Row(original.data(), 576, 512, zeroed_bytes.data());
  DecodeFp8Row(zeroed_bytes.data(), 576, 512, clean.data());
  // An infinity makes its group non-finite (as it would be in f32 rows); other groups are intact.
  row = original;
  row[130] = std::numeric_limits<float>::infinity();
  EncodeFp8Row(row.data(), 576, 512, bytes.data());
  DecodeFp8Row(bytes.data(), 576, 512, back.data());
  for (int i = 128; i < 256; ++i) EXPECT_FALSE(std::isfinite(back[i])) << "value " << i;
  for (int i = 0; i < 128; ++i) EXPECT_EQ(back[i], clean[i]);
  for (int i = 256; i < 576; ++i) EXPECT_EQ(back[i], clean[i]);
}

TEST(Fp8Rows, VectorPathMatchesTheScalarReference) {
  // EncodeFp8Row / DecodeFp8Row may use vector instructions: bit for bit the scalar reference,
  // on rows of every alignment of width, with NaN, zeros and subnormal-scale groups.
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t values : {1, 7, 8, 9, 36, 128, 130, 576}) {
    for (int64_t fp8 : {values, values / 2, values - 1}) {
      if (fp8 <= 0) continue;
      std::vector<float> row(values);
      for (int trial = 0; trial < 20; ++trial) {
        for (float& v : row) v = normal(rng) * std::exp2(static_cast<float>(trial - 10) * 6);
        if (trial == 3) row[0] = std::nanf("");
        if (trial == 4) std::fill(row.begin(), row.end(), 0.0f);
        std::vector<uint8_t> fast(Fp8RowBytes(values, fp8)), slow(fast.size());
        EncodeFp8Row(row.data(), values, fp8, fast.data());
        EncodeFp8RowScalar(row.data(), values, fp8, slow.data());
        ASSERT_EQ(fast, slow) << values << " values, " << fp8 << " fp8, trial " << trial;
        std::vector<float> a(values), b(values);
        DecodeFp8Row(fast.data(), values, fp8, a.data());
        DecodeFp8RowScalar(fast.data(), values, fp8, b.data());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), values * sizeof(float)))
            << values << " values, " << fp8 << " fp8, trial " << trial;
      }
    }
  }
}

// The engine's cache reports the bytes per token per layer (the metrics' and startup log's
// cache_layer_bytes_per_token) for DeepSeek V3 dims: 656 in fp8 rows, 788 with V3.2's indexer key.
TEST(Fp8Rows, EngineCacheReportsDeepseekBytesPerLayer) {
  for (const char* type : {"deepseek_v3", "deepseek_v32"}) {
    const model::ModelConfig config = model::ModelConfig::FromJson(std::string(R"({"model_type": ")") + type + R"(",
      "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
      "num_attention_heads": 2, "q_lora_rank": 16, "kv_lora_rank": 512, "qk_nope_head_dim": 8,
      "qk_rope_head_dim": 64, "v_head_dim": 8, "index_n_heads": 2, "index_head_dim": 128,
      "index_topk": 4})", type);
    const uint64_t per_layer = std::string(type) == "deepseek_v3" ? 656 : 656 + 132;
    engine::CacheOptions options;
    options.block_tokens = 4;
    options.num_blocks = 2;
    options.dtype = model::CacheDType::kFP8;
    engine::CacheManager manager(config, options);
    EXPECT_EQ(manager.layer_bytes_per_token(), per_layer) << type;
    EXPECT_EQ(manager.bytes_per_token(), 3 * per_layer) << type;
    // And a row written through the engine's view reads back as the encoding says.
    BlockTable table = manager.NewTable();
    ASSERT_TRUE(table.Grow(manager.pool(), 5));
    const std::vector<float> row = LatentRow(3);
    manager.rows().WriteRow(table.blocks(), 2, 0, 4, row.data());
    std::vector<float> got(576), want(576);
    manager.rows().GatherRows(table.blocks(), 2, 0, 5, std::vector<float>(5 * 576).data());
    const std::vector<int32_t> position = {4};
    manager.rows().GatherPositions(table.blocks(), 2, 0, position, got.data());
    std::vector<uint8_t> bytes(656);
    EncodeFp8RowScalar(row.data(), 576, 512, bytes.data());
    DecodeFp8RowScalar(bytes.data(), 576, 512, want.data());
    EXPECT_EQ(got, want) << type;
    EXPECT_EQ(0, std::memcmp(manager.rows().Locate(table.blocks(), 2, 0, 4), bytes.data(), 656)) << type;
    options.dtype = model::CacheDType::kBF16;
    EXPECT_EQ(engine::CacheManager(config, options).layer_bytes_per_token(),
              std::string(type) == "deepseek_v3" ? 1152u : 1152u + 256) << type;
    table.Free(manager.pool());
  }
}

}  // namespace
}  // namespace latent::cache
