// --quantize int8's row quantizer: symmetric, scale = max |w| / 127, round to nearest even.
#include "model/weight_quantization.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "model/load_options.h"

namespace latent::model {
namespace {

TEST(QuantizeRowInt8, SymmetricPerRowWithTiesToEven) {
  // max |w| = 127: scale 1, so q = round(w) exactly, ties to even.
  const std::vector<float> w = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -127.0f, 3.49f, -3.51f};
  std::vector<int8_t> q(w.size());
  EXPECT_EQ(QuantizeRowInt8(w.data(), static_cast<int64_t>(w.size()), q.data()), 1.0f);
  EXPECT_EQ(q, (std::vector<int8_t>{127, 0, 2, 2, 0, -2, -127, 3, -4}));
}

TEST(QuantizeRowInt8, ScaleIsMaxOver127AndZeroRowsStayZero) {
  const std::vector<float> w = {0.1f, -0.2f, 0.05f};
  std::vector<int8_t> q(3);
  const float scale = QuantizeRowInt8(w.data(), 3, q.data());
  EXPECT_EQ(scale, 0.2f / 127.0f);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[0], static_cast<int8_t>(std::nearbyint(0.1f / scale)));
  const std::vector<float> zeros(5, 0.0f);
  std::vector<int8_t> qz(5, 9);
  EXPECT_EQ(QuantizeRowInt8(zeros.data(), 5, qz.data()), 0.0f);
  EXPECT_EQ(qz, std::vector<int8_t>(5, 0));
}

TEST(WeightQuantization, ParsesModesAndRejectsOthers) {
  EXPECT_EQ(ParseWeightQuantization("none"), WeightQuantization::kNone);
  EXPECT_EQ(ParseWeightQuantization("int8"), WeightQuantization::kInt8);
  EXPECT_EQ(ParseWeightQuantization("w8a8"), WeightQuantization::kW8A8);
  EXPECT_STREQ(WeightQuantizationName(WeightQuantization::kInt8), "int8");
  EXPECT_STREQ(WeightQuantizationName(WeightQuantization::kW8A8), "w8a8");
  try {
    ParseWeightQuantization("int4");
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "--quantize: unknown mode 'int4' (supported: none, int8, w8a8)");
  }
}

TEST(WeightQuantization, W8A8KeepsKvBActivationsInF32) {
  EXPECT_TRUE(W8A8Activations("model.layers.0.self_attn.q_b_proj.weight"));
  EXPECT_TRUE(W8A8Activations("lm_head.weight"));
  EXPECT_FALSE(W8A8Activations("model.layers.3.self_attn.kv_b_proj.weight"));
}

}  // namespace
}  // namespace latent::model
