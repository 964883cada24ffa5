// The config quirks of the youtu, glm4_moe_lite and minicpm3 families (arch/youtu.cc,
// arch/glm4_moe_lite.cc, arch/minicpm3.cc) and LongRoPE's keys and frequencies.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "config_test_util.h"
#include "model/model_config.h"
#include "ops/rope.h"

namespace latent::model {
namespace {

using config_test::Json;

// Shaped like openbmb/MiniCPM3-4B's config.json (legacy rope_scaling, no v_head_dim, eos list);
// the factor values are illustrative.
Json MiniCpm3() {
  Json j = Json::parse(R"({
    "architectures": ["MiniCPM3ForCausalLM"], "bos_token_id": 1, "eos_token_id": [2, 73440],
    "hidden_act": "silu", "hidden_size": 2560, "initializer_range": 0.1,
    "intermediate_size": 6400, "max_position_embeddings": 32768, "num_attention_heads": 40,
    "num_hidden_layers": 62, "num_key_value_heads": 40, "rms_norm_eps": 1e-05,
    "torch_dtype": "bfloat16", "vocab_size": 73448, "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 32, "q_lora_rank": 768, "kv_lora_rank": 256, "scale_emb": 12,
    "dim_model_base": 256, "scale_depth": 1.4, "use_cache": true, "model_type": "minicpm3"
  })");
  Json short_factor = Json::array(), long_factor = Json::array();
  for (int i = 0; i < 16; ++i) {
    short_factor.push_back(1.0 + 0.01 * i);
    long_factor.push_back(1.0 + 2.0 * i);
  }
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", short_factor},
                       {"long_factor", long_factor}, {"original_max_position_embeddings", 32768}};
  return j;
}

Json TinyDense(const char* model_type) {
  return Json::parse(std::string(R"({"model_type": ")") + model_type + R"(", "vocab_size": 256,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
    "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
    "v_head_dim": 16, "max_position_embeddings": 512})");
}

Json TinyGlm4MoeLite() {
  Json j = TinyDense("glm4_moe_lite");
  j["n_routed_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  return j;
}

using config_test::ErrorFor;
using config_test::With;
using config_test::Parse;

TEST(DenseFamilyConfigTest, MiniCpm3) {
  const ModelConfig c = Parse(MiniCpm3());
  EXPECT_EQ(c.architecture, "minicpm3");
  EXPECT_EQ(c.v_head_dim, 64);  // hidden_size / num_attention_heads when omitted
  EXPECT_FALSE(c.rope_interleave);
  EXPECT_TRUE(c.tie_word_embeddings);  // MiniCPM3Config's default
  EXPECT_EQ(c.n_routed_experts, 0);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) EXPECT_FALSE(c.IsMoeLayer(l));
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.embedding_scale, 12.0);
  EXPECT_DOUBLE_EQ(c.residual_scale, 1.4 / std::sqrt(62.0));
  EXPECT_DOUBLE_EQ(c.logits_divisor, 10.0);
  EXPECT_EQ(c.rope.type, RopeType::kLongRope);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rope.factor, 1.0);  // max_position_embeddings / original
  ASSERT_EQ(c.rope.long_factor.size(), 16u);
  EXPECT_DOUBLE_EQ(c.rope.long_factor[3], 7.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2, 73440}));
}

TEST(DenseFamilyConfigTest, MiniCpm3NullScalingsAreNoOps) {
  Json j = MiniCpm3();
  j["scale_depth"] = nullptr;
  j["dim_model_base"] = nullptr;
  const ModelConfig c = Parse(j);
  EXPECT_DOUBLE_EQ(c.residual_scale, 1.0);
  EXPECT_DOUBLE_EQ(c.logits_divisor, 1.0);
  j["dim_model_base"] = 0;
  EXPECT_CONFIG_ERROR(j, "'dim_model_base' must be positive");
}

TEST(DenseFamilyConfigTest, LongRopeFrequenciesSwitchPastTheOriginalLength) {
  Json j = MiniCpm3();
  j["max_position_embeddings"] = 4 * 32768;  // factor 4: cos/sin scaled by sqrt(1 + ln 4 / ln 32768)
  const ModelConfig c = Parse(j);
  const ops::Rope rope = ops::Rope::FromConfig(c.rope, 32, c.qk_head_dim(), false, false);
  EXPECT_FLOAT_EQ(rope.attention_factor, static_cast<float>(std::sqrt(1 + std::log(4.0) / std::log(32768.0))));
  EXPECT_FLOAT_EQ(rope.inv_freq[1], 1.0f / (1.01f * std::pow(10000.0f, 2.0f / 32.0f)));
  EXPECT_FLOAT_EQ(rope.long_inv_freq[1], 1.0f / (3.0f * std::pow(10000.0f, 2.0f / 32.0f)));
  float cos[16], sin[16], long_cos[16], long_sin[16];
  rope.CosSin(100, 32768, cos, sin);            // not longer than the original: short factors
  rope.CosSin(100, 32769, long_cos, long_sin);  // longer: long factors, same position
  EXPECT_FLOAT_EQ(cos[1], std::cos(100 * rope.inv_freq[1]) * rope.attention_factor);
  EXPECT_FLOAT_EQ(long_cos[1], std::cos(100 * rope.long_inv_freq[1]) * rope.attention_factor);
  EXPECT_FLOAT_EQ(cos[0], long_cos[0]);  // factor 1.0 in both sets
}

TEST(DenseFamilyConfigTest, RejectsBadLongRope) {
  Json j = MiniCpm3();
  j["rope_scaling"]["long_factor"].erase(size_t{0});
  EXPECT_CONFIG_ERROR(j, "longrope needs 'long_factor' as a list of 16 numbers (qk_rope_head_dim / 2)");
  j = MiniCpm3();
  j["rope_scaling"]["short_factor"][2] = -1;
  EXPECT_CONFIG_ERROR(j, "'short_factor' entries must be positive numbers");
  j = MiniCpm3();
  j["rope_scaling"].erase("original_max_position_embeddings");
  EXPECT_CONFIG_ERROR(j, "longrope needs 'original_max_position_embeddings'");
  j = MiniCpm3();
  j["n_routed_experts"] = 4;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  EXPECT_CONFIG_ERROR(j, "minicpm3 has no experts");
}

TEST(DenseFamilyConfigTest, Youtu) {
  const ModelConfig c = Parse(TinyDense("youtu"));
  EXPECT_EQ(c.architecture, "youtu");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(*c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001}));
  Json j = TinyDense("youtu");
  j["n_routed_experts"] = 4;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  EXPECT_CONFIG_ERROR(j, "youtu has no experts, but n_routed_experts is 4");
}

TEST(DenseFamilyConfigTest, Glm4MoeLiteLayerKindsAndEps) {
  ModelConfig c = Parse(TinyGlm4MoeLite());
  EXPECT_EQ(c.architecture, "glm4_moe_lite");
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSigmoid);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.8);
  EXPECT_EQ(c.n_shared_experts, 1);
  // No mlp_layer_types: dense first, MoE after, whatever first_k_dense_replace says.
  Json j = TinyGlm4MoeLite();
  j["first_k_dense_replace"] = 3;
  c = Parse(j);
  EXPECT_EQ(c.moe_layers, (std::vector<bool>{false, true, true, true}));
  j["mlp_layer_types"] = {"sparse", "dense", "dense", "sparse"};
  c = Parse(j);
  EXPECT_EQ(c.moe_layers, (std::vector<bool>{true, false, false, true}));
}

TEST(DenseFamilyConfigTest, Glm4MoeLitePartialRotaryMustCoverTheRotaryPart) {
  Json j = TinyGlm4MoeLite();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 1.0}};
  EXPECT_EQ(Parse(j).qk_rope_head_dim, 8);
  j["rope_parameters"]["partial_rotary_factor"] = 0.5;
  EXPECT_CONFIG_ERROR(j, "partial_rotary_factor 0.5 rotates 4 of the 8 qk_rope_head_dim dims");
  EXPECT_CONFIG_ERROR(With(TinyGlm4MoeLite(), "partial_rotary_factor", 0.5),
                      "partial_rotary_factor 0.5 rotates 4 of the 8");
}

}  // namespace
}  // namespace latent::model
