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

TEST(QuantizeRowInt8, ARowWithANanGetsANanScale) {
  // Dropping the NaN (its old rule) gave finite outputs the sampler could not tell from real ones.
  const std::vector<float> w = {0.5f, NAN, -2.0f};
  std::vector<int8_t> q(3, 9);
  EXPECT_TRUE(std::isnan(QuantizeRowInt8(w.data(), 3, q.data())));
  EXPECT_EQ(q, std::vector<int8_t>(3, 0));
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

// A checkpoint known from config.json alone: fp8 blocks only on linear weights and experts, with
// f32 scales per block (over every leading dim of fused experts); routers and buffers f32.
TEST(WeightQuantization, StoredBytesOfAConfigOnlyCheckpoint) {
  const ExpectedWeight linear{.name = "q", .shape = {300, 200}, .kind = WeightKind::kLinear,
      .target = {}};
  EXPECT_EQ(StoredBytes(linear, StoredDType::kBF16, 128, 128), 2 * 300 * 200);
  // ceil(300 / 128) = 3 x ceil(200 / 128) = 2 scales.
  EXPECT_EQ(StoredBytes(linear, StoredDType::kFP8Block, 128, 128), 300 * 200 + 4 * 3 * 2);
  const ExpectedWeight fused{.name = "e", .shape = {4, 256, 64}, .kind = WeightKind::kExperts,
      .target = {}};
  EXPECT_EQ(StoredBytes(fused, StoredDType::kFP8Block, 128, 128), 4 * 256 * 64 + 4 * 4 * 2 * 1);
  const ExpectedWeight embed{.name = "embed", .shape = {10, 8}, .kind = WeightKind::kEmbedding,
      .target = {}};
  EXPECT_EQ(StoredBytes(embed, StoredDType::kFP8Block, 128, 128), 2 * 80);
  const ExpectedWeight router{.name = "gate", .shape = {16, 8}, .kind = WeightKind::kRouter,
      .target = {}};
  EXPECT_EQ(StoredBytes(router, StoredDType::kBF16, 128, 128), 4 * 128);
  const ExpectedWeight bias{.name = "bias", .shape = {16}, .kind = WeightKind::kBuffer,
      .target = {}};
  EXPECT_EQ(StoredBytes(bias, StoredDType::kFP8Block, 128, 128), 4 * 16);
  EXPECT_TRUE(Fp8Eligible(linear) && Fp8Eligible(fused));
  EXPECT_FALSE(Fp8Eligible(embed) || Fp8Eligible(router) || Fp8Eligible(bias));
}

// The one count behind both forms of `latent info`: a rank of an expert-parallel job holds its
// routed experts' share of per-expert and fused tensors, and int8 adds f32 row scales.
TEST(WeightQuantization, LoadedBytesSplitExpertsAcrossRanks) {
  const ModelConfig config = ModelConfig::FromJson(R"({
    "model_type": "deepseek_v3", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 2, "q_lora_rank": 16, "kv_lora_rank": 16,
    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 8, "n_group": 2, "topk_group": 1,
    "first_k_dense_replace": 1})",
                                                   "test");
  const auto bf16 = [](const ExpectedWeight& w) {
    return StoredBytes(w, StoredDType::kBF16, 128, 128);
  };
  // One expert MLP: gate, up [8, 32] and down [32, 8].
  const int64_t expert = 3 * 8 * 32;
  for (ExpertLayout layout : {ExpertLayout::kPerExpert, ExpertLayout::kFused}) {
    const std::vector<ExpectedWeight> weights = ExpectedWeights(config, layout);
    const int64_t all = LoadedWeightBytes(config, weights, bf16, WeightQuantization::kNone);
    const int64_t half = LoadedWeightBytes(config, weights, bf16, WeightQuantization::kNone,
                                           nullptr, ExpertShard{1, 2});
    EXPECT_EQ(all - half, 2 * 2 * expert) << static_cast<int>(layout);  // 2 of 4 experts, bf16
    const int64_t int8 = LoadedWeightBytes(config, weights, bf16, WeightQuantization::kInt8,
                                           nullptr, ExpertShard{1, 2});
    const int64_t int8_all = LoadedWeightBytes(config, weights, bf16, WeightQuantization::kInt8);
    EXPECT_EQ(int8_all - int8, 2 * (expert + 4 * (8 + 8 + 32))) << static_cast<int>(layout);
  }
}

}  // namespace
}  // namespace latent::model
