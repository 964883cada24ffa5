// --quantize int8's row quantizer: symmetric, scale = max |w| / 127, round to nearest even.
#include "model/weight_quantization.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/load_options.h"
#include "model/model_config.h"
#include "model/weight_table.h"

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

// The tensor list's rules: kv_b_proj is converted but keeps f32 activations, the DSA indexer and
// the norms stay as stored.
TEST(WeightQuantization, W8A8KeepsKvBActivationsInF32) {
  const ModelConfig config = ModelConfig::FromJson(R"({
    "model_type": "deepseek_v32", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 4, "num_attention_heads": 2, "q_lora_rank": 16, "kv_lora_rank": 16,
    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 8, "n_group": 2, "topk_group": 1,
    "first_k_dense_replace": 1, "index_n_heads": 2, "index_head_dim": 8, "index_topk": 4})",
                                                   "test");
  std::map<std::string, ExpectedWeight> by_name;
  for (const ExpectedWeight& w : ExpectedWeights(config, ExpertLayout::kPerExpert)) by_name.emplace(w.name, w);
  auto at = [&](const std::string& name) {
    EXPECT_TRUE(by_name.count(name)) << name;
    return by_name.at(name);
  };
  EXPECT_TRUE(W8A8Activations(at("model.layers.0.self_attn.q_b_proj.weight")));
  EXPECT_TRUE(W8A8Activations(at("lm_head.weight")));
  EXPECT_TRUE(QuantizedByInt8(at("model.layers.3.self_attn.kv_b_proj.weight")));
  EXPECT_FALSE(W8A8Activations(at("model.layers.3.self_attn.kv_b_proj.weight")));
  EXPECT_TRUE(W8A8Activations(at("model.layers.2.mlp.experts.3.down_proj.weight")));
  EXPECT_FALSE(QuantizedByInt8(at("model.layers.1.self_attn.indexer.wq_b.weight")));
  EXPECT_FALSE(QuantizedByInt8(at("model.layers.1.mlp.gate.weight")));
  EXPECT_FALSE(QuantizedByInt8(at("model.embed_tokens.weight")));
}

}  // namespace
}  // namespace latent::model
