// ModelConfig::FromJson on real-world configs (DeepSeek V2-Lite, V3, Kimi K2, a transformers 5
// save) and on broken ones, each of which must fail with a message naming the field.
#include "model/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "config_test_util.h"

namespace latent::model {
namespace {

using config_test::Json;

// deepseek-ai/DeepSeek-V3 config.json, as published (auto_map trimmed).
constexpr const char* kDeepseekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
  "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
  "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
  "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
  "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
  "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
  "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 129280
})";

// deepseek-ai/DeepSeek-V2-Lite config.json: no q LoRA, greedy softmax routing, YaRN with mscale.
constexpr const char* kDeepseekV2Lite = R"({
  "architectures": ["DeepseekV2ForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0, "aux_loss_alpha": 0.001,
  "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
  "model_type": "deepseek_v2", "moe_intermediate_size": 1408, "moe_layer_freq": 1,
  "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": false,
  "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27,
  "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": null,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                   "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 1, "topk_method": "greedy",
  "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 102400
})";

// moonshotai/Kimi-K2-Instruct config.json, with eos_token_id given as a list.
constexpr const char* kKimiK2 = R"({
  "architectures": ["DeepseekV3ForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0, "aux_loss_alpha": 0.001,
  "bos_token_id": 163584, "eos_token_id": [163585, 163586], "first_k_dense_replace": 1,
  "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02,
  "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 131072,
  "model_type": "kimi_k2", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 1,
  "n_routed_experts": 384, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 64, "num_experts_per_tok": 8, "num_hidden_layers": 61,
  "num_key_value_heads": 64, "num_nextn_predict_layers": 0, "pretraining_tp": 1,
  "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 50000.0, "routed_scaling_factor": 2.827, "scoring_func": "sigmoid",
  "seq_aux": true, "tie_word_embeddings": false, "topk_group": 1, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.48.3", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 163840
})";

// What transformers 5.24 save_pretrained writes for a small DeepseekV3Config: rope_parameters
// with rope_theta inside and no top-level rope_theta, `dtype` instead of torch_dtype.
constexpr const char* kTransformers5 = R"({
  "architectures": ["DeepseekV3ForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 0, "dtype": "bfloat16",
  "eos_token_id": 1, "first_k_dense_replace": 1, "head_dim": 8, "hidden_act": "silu",
  "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128, "kv_lora_rank": 16,
  "max_position_embeddings": 8192, "model_type": "deepseek_v3", "moe_intermediate_size": 32,
  "n_group": 2, "n_routed_experts": 8, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
  "num_key_value_heads": 4, "num_nextn_predict_layers": 1, "output_router_logits": false,
  "pad_token_id": null, "pretraining_tp": 1, "q_lora_rank": 32, "qk_head_dim": 24,
  "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "rms_norm_eps": 1e-06,
  "rope_interleave": false,
  "rope_parameters": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 4.0, "mscale": 1.0,
                      "mscale_all_dim": 1.0, "original_max_position_embeddings": 2048,
                      "rope_theta": 50000.0, "rope_type": "yarn", "type": "yarn"},
  "routed_scaling_factor": 2.5, "tie_word_embeddings": false, "topk_group": 1,
  "transformers_version": "5.24.0", "use_cache": true, "v_head_dim": 16, "vocab_size": 1000
})";

// A small valid V3 config that the error cases below break one field at a time.
Json TinyV3() {
  return Json::parse(R"({
    "model_type": "deepseek_v3", "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
    "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
    "v_head_dim": 16, "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1,
    "max_position_embeddings": 512
  })");
}

Json TinyV2() {
  Json j = TinyV3();
  j["model_type"] = "deepseek_v2";
  j["topk_method"] = "greedy";
  return j;
}

using config_test::ErrorFor;
using config_test::Parse;
using config_test::With;

TEST(ModelConfigTest, ParsesDeepseekV3) {
  ModelConfig c = Parse(kDeepseekV3);
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_EQ(c.architecture, "deepseek_v3");
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.intermediate_size, 18432);
  EXPECT_EQ(c.num_hidden_layers, 61);
  EXPECT_EQ(c.num_attention_heads, 128);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_head_dim(), 192);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_TRUE(c.rope_interleave);

  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 40.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 1.0);
  EXPECT_FALSE(c.rope.attention_factor.has_value());
  EXPECT_TRUE(c.rope.truncate);

  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_EQ(c.topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSigmoid);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_FALSE(c.IsMoeLayer(2));  // first_k_dense_replace = 3
  EXPECT_TRUE(c.IsMoeLayer(3));
  EXPECT_TRUE(c.IsMoeLayer(60));

  EXPECT_TRUE(c.quantization.fp8);
  EXPECT_EQ(c.quantization.block_n, 128);
  EXPECT_EQ(c.quantization.block_k, 128);
  EXPECT_EQ(c.quantization.activation_scheme, "dynamic");
  EXPECT_EQ(c.quantization.scale_fmt, "");
  EXPECT_EQ(c.dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
}

TEST(ModelConfigTest, ParsesLinearAndLlama3Rope) {
  Json j = TinyV3();
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 4}, {"mscale_all_dim", 0.707}};
  ModelConfig c = Parse(j.dump());
  EXPECT_EQ(c.rope.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 0.707);  // Scales the softmax for any scaled type.
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 1},
                          {"high_freq_factor", 4}, {"original_max_position_embeddings", 8192}};
  c = Parse(j.dump());
  EXPECT_EQ(c.rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  // The default type has no scaling to take mscale_all_dim from: transformers ignores it there.
  j["rope_parameters"] = {{"rope_type", "default"}, {"mscale_all_dim", 0.707}};
  EXPECT_DOUBLE_EQ(Parse(j.dump()).rope.mscale_all_dim, 0.0);
}

TEST(ModelConfigTest, ParsesTransformers5RopeParameters) {
  ModelConfig c = Parse(kTransformers5);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 50000.0);  // From inside rope_parameters.
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 2048);
  EXPECT_FALSE(c.rope_interleave);
  EXPECT_EQ(c.dtype, "bfloat16");
  EXPECT_EQ(c.n_group, 2);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_EQ(c.topk_method, TopkMethod::kNoauxTc);  // The V3 default when topk_method is absent.
  EXPECT_EQ(c.quantization.fp8, false);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
}

TEST(ModelConfigTest, DefaultRopeParametersCarryTheta) {
  Json j = TinyV3();
  j["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "default"}};
  ModelConfig c = Parse(j.dump());
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  // Without rope_parameters or rope_scaling, the top-level rope_theta is used.
  j = TinyV3();
  j["rope_theta"] = 500000;
  EXPECT_DOUBLE_EQ(Parse(j.dump()).rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(Parse(TinyV3().dump()).rope.theta, 10000.0);
}

TEST(ModelConfigTest, AgreeingRopeScalingAndRopeParametersAreAccepted) {
  Json j = TinyV3();
  j["rope_theta"] = 10000;
  j["rope_scaling"] = {
      {"type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096}};
  j["rope_parameters"] = {{"rope_type", "yarn"},
                          {"factor", 40.0},  // 40 and 40.0 are the same number.
                          {"original_max_position_embeddings", 4096},
                          {"rope_theta", 10000.0}};
  ModelConfig c = Parse(j.dump());
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.factor, 40.0);
}

TEST(ModelConfigTest, ParsesDeepseekV2Lite) {
  ModelConfig c = Parse(kDeepseekV2Lite);
  EXPECT_EQ(c.architecture, "deepseek_v2");
  EXPECT_FALSE(c.q_lora_rank.has_value());
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_TRUE(c.rope_interleave);  // V2 always pairs adjacent dims.
  EXPECT_EQ(c.topk_method, TopkMethod::kGreedy);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSoftmax);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.n_routed_experts, 64);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.factor, 40.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale, 0.707);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 0.707);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_FALSE(c.quantization.fp8);
  EXPECT_EQ(c.bos_token_id, 100000);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{100001});
}

// Greedy routing has no groups, so group fields it ignores (here topk_group > n_group, which a
// grouped router would reject) leave one group of all experts rather than unchecked values.
TEST(ModelConfigTest, GreedyRoutingIgnoresGroupFields) {
  Json j = TinyV2();
  j["n_group"] = 1;
  j["topk_group"] = 2;
  ModelConfig c = Parse(j.dump());
  EXPECT_EQ(c.topk_method, TopkMethod::kGreedy);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.topk_group, 1);
}

// DeepseekV2/V3 (and Mistral4) decoder layers are MoE from first_k_dense_replace on whatever
// moe_layer_freq says, a number, a list or null: latent refused any number but 1.
TEST(ModelConfigTest, MoeLayerFreqIsIgnoredWhereTransformersIgnoresIt) {
  for (Json j : {TinyV3(), TinyV2()}) {
    for (const Json& freq : {Json(2), Json(0), Json::array({1, 0, 1}), Json()}) {
      j["moe_layer_freq"] = freq;
      EXPECT_EQ(Parse(j.dump()).moe_layers, (std::vector<bool>{false, true, true})) << j.dump();
    }
  }
}

// DeepseekV2Config refuses a null first_k_dense_replace, and DeepseekV3's decoder layers compare
// it with the layer index (TypeError): latent read it as the class default.
TEST(ModelConfigTest, NullFirstKDenseReplaceIsRefusedWhereTransformersFails) {
  for (Json j : {TinyV3(), TinyV2()}) {
    j["first_k_dense_replace"] = nullptr;
    EXPECT_CONFIG_ERROR(j, "'first_k_dense_replace' is null (transformers fails on it)");
    j["mlp_layer_types"] = Json::array({"dense", "sparse", "sparse"});  // ignored by these classes
    EXPECT_CONFIG_ERROR(j, "'first_k_dense_replace' is null (transformers fails on it)");
  }
}

// A negative count made every layer MoE, and the load then named the first layer's router as a
// missing tensor; past the layers, every layer is dense, as transformers reads it.
TEST(ModelConfigTest, NegativeFirstKDenseReplaceIsRefusedByName) {
  EXPECT_CONFIG_ERROR(With(TinyV3(), "first_k_dense_replace", -1),
                      "field 'first_k_dense_replace' must be non-negative, got -1");
  EXPECT_EQ(Parse(With(TinyV3(), "first_k_dense_replace", 0)).moe_layers,
            (std::vector<bool>{true, true, true}));
  EXPECT_EQ(Parse(With(TinyV3(), "first_k_dense_replace", 5)).moe_layers,
            (std::vector<bool>{false, false, false}));
}

TEST(ModelConfigTest, KimiK2IsTheDeepseekV3Architecture) {
  ModelConfig c = Parse(kKimiK2);
  EXPECT_EQ(c.model_type, "kimi_k2");
  EXPECT_EQ(c.architecture, "deepseek_v3");
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_DOUBLE_EQ(c.rope.theta, 50000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 1.0);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.827);
  EXPECT_EQ(c.bos_token_id, 163584);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{163585, 163586}));
}

TEST(ModelConfigTest, TokenIdDefaultsAndNulls) {
  Json j = TinyV3();
  ModelConfig absent = Parse(j.dump());  // transformers' V3 defaults: bos 0, eos 1.
  EXPECT_EQ(absent.bos_token_id, 0);
  EXPECT_EQ(absent.eos_token_ids, std::vector<int64_t>{1});
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  ModelConfig nulls = Parse(j.dump());
  EXPECT_FALSE(nulls.bos_token_id.has_value());
  EXPECT_TRUE(nulls.eos_token_ids.empty());
  ModelConfig v2 = Parse(TinyV2().dump());  // V2 defaults: bos 1, eos 2.
  EXPECT_EQ(v2.bos_token_id, 1);
  EXPECT_EQ(v2.eos_token_ids, std::vector<int64_t>{2});
}

TEST(ModelConfigTest, DenseModelNeedsNoMoeFields) {
  Json j = TinyV3();
  for (const char* key : {"n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                          "n_group", "topk_group"}) {
    j.erase(key);
  }
  ModelConfig c = Parse(j.dump());
  EXPECT_EQ(c.n_routed_experts, 0);
  EXPECT_FALSE(c.IsMoeLayer(2));
}

TEST(ModelConfigTest, AcceptsIntegralFloats) {
  Json j = TinyV3();
  j["hidden_size"] = 64.0;
  EXPECT_EQ(Parse(j.dump()).hidden_size, 64);
}

TEST(ModelConfigTest, RejectsBadJsonAndModelTypes) {
  EXPECT_CONFIG_ERROR(std::string("{\"model_type\": "), "invalid JSON");
  EXPECT_CONFIG_ERROR(std::string("[1, 2]"), "not a JSON object");
  Json j = TinyV3();
  j["model_type"] = "llama";
  EXPECT_CONFIG_ERROR(
      j, "unsupported model_type 'llama' (supported: deepseek_v2, deepseek_v3, kimi_k2, deepseek_v32, glm_moe_dsa, youtu, glm4_moe_lite, axk1, mistral4, minicpm3, longcat_flash, axk2, hy_v4, mistral_large4_text, dots3_note_text, kimi_linear, bailing_hybrid, glm5_next_text)");
  j.erase("model_type");
  EXPECT_CONFIG_ERROR(j, "missing 'model_type' (supported: deepseek_v2, deepseek_v3, kimi_k2, deepseek_v32, glm_moe_dsa, youtu, glm4_moe_lite, axk1, mistral4, minicpm3, longcat_flash, axk2, hy_v4, mistral_large4_text, dots3_note_text, kimi_linear, bailing_hybrid, glm5_next_text)");
  EXPECT_EQ(SupportedModelTypes(), "deepseek_v2, deepseek_v3, kimi_k2, deepseek_v32, glm_moe_dsa, youtu, glm4_moe_lite, axk1, mistral4, minicpm3, longcat_flash, axk2, hy_v4, mistral_large4_text, dots3_note_text, kimi_linear, bailing_hybrid, glm5_next_text");
}

TEST(ModelConfigTest, RejectsMissingOrBadDimensions) {
  Json j = TinyV3();
  j.erase("kv_lora_rank");
  EXPECT_CONFIG_ERROR(j, "missing required field 'kv_lora_rank'");
  j = TinyV3();
  j.erase("q_lora_rank");
  EXPECT_CONFIG_ERROR(j, "missing field 'q_lora_rank' (null for none)");
  j = TinyV3();
  j["qk_rope_head_dim"] = 7;
  EXPECT_CONFIG_ERROR(j, "qk_rope_head_dim (7) must be even");
  j = TinyV3();
  j["hidden_size"] = 0;
  EXPECT_CONFIG_ERROR(j, "field 'hidden_size' must be positive, got 0");
  j["hidden_size"] = 1.5;
  EXPECT_CONFIG_ERROR(j, "field 'hidden_size' must be an integer, got 1.5");
  j["hidden_size"] = "64";
  EXPECT_CONFIG_ERROR(j, "field 'hidden_size' must be an integer");
}

TEST(ModelConfigTest, RejectsIntegersOutsideInt64) {
  // Casting 1e300 to int64 is undefined behaviour, and 2^64 - 1 would wrap to -1.
  Json j = TinyV3();
  j["hidden_size"] = 1e300;
  EXPECT_CONFIG_ERROR(j, "field 'hidden_size' must be an integer, got 1e+300");
  j["hidden_size"] = 9223372036854775808.0;  // 2^63
  EXPECT_CONFIG_ERROR(j, "field 'hidden_size' must be an integer");
  EXPECT_CONFIG_ERROR(
      std::string(R"({"model_type": "deepseek_v3", "vocab_size": 18446744073709551615})"),
      "field 'vocab_size' is out of range, got 18446744073709551615");
  j = TinyV3();
  j["first_k_dense_replace"] = 18446744073709551615u;
  EXPECT_CONFIG_ERROR(j, "field 'first_k_dense_replace' is out of range");
}

TEST(ModelConfigTest, RejectsInconsistentMoe) {
  Json j = TinyV3();
  j["num_experts_per_tok"] = 9;
  EXPECT_CONFIG_ERROR(j, "num_experts_per_tok (9) exceeds n_routed_experts (8)");
  j = TinyV3();
  j["topk_group"] = 5;
  EXPECT_CONFIG_ERROR(j, "topk_group (5) exceeds n_group (4)");
  j = TinyV3();
  j["n_group"] = 3;
  EXPECT_CONFIG_ERROR(j, "n_routed_experts (8) is not divisible by n_group (3)");
  j = TinyV3();
  j["n_group"] = 4;
  j["topk_group"] = 1;
  j["num_experts_per_tok"] = 3;  // One group of 2 experts cannot supply 3.
  EXPECT_CONFIG_ERROR(j, "cannot supply num_experts_per_tok (3)");
  j = TinyV3();
  j["n_group"] = 8;
  j["topk_group"] = 2;
  EXPECT_CONFIG_ERROR(j, "noaux_tc needs at least 2 experts per group, got 1");
  j = TinyV3();
  j.erase("moe_intermediate_size");
  EXPECT_CONFIG_ERROR(j, "missing required field 'moe_intermediate_size'");
}

TEST(ModelConfigTest, RejectsRoutingThatContradictsTheModelType) {
  Json j = TinyV3();
  j["scoring_func"] = "softmax";
  EXPECT_CONFIG_ERROR(
      j, "scoring_func 'softmax' contradicts model_type 'deepseek_v3', which routes with sigmoid");
  j = TinyV2();
  j["scoring_func"] = "sigmoid";
  EXPECT_CONFIG_ERROR(
      j, "scoring_func 'sigmoid' contradicts model_type 'deepseek_v2', which routes with softmax");
  j = TinyV2();
  j["topk_method"] = "noaux_tc";
  EXPECT_CONFIG_ERROR(j, "topk_method 'noaux_tc' is not supported for model_type 'deepseek_v2'");
  j = TinyV3();
  j["topk_method"] = "greedy";
  EXPECT_CONFIG_ERROR(j, "topk_method 'greedy' is not supported for model_type 'deepseek_v3'");
  // V2's group_limited_greedy has no n_group default in transformers; it must be stated.
  j = TinyV2();
  j["topk_method"] = "group_limited_greedy";
  j["n_group"] = nullptr;
  EXPECT_CONFIG_ERROR(j, "topk_method 'group_limited_greedy' needs 'n_group'");
}

TEST(ModelConfigTest, RejectsBadRope) {
  Json j = TinyV3();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 40}};
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 32}};
  EXPECT_CONFIG_ERROR(
      j, "contradictory rope settings: rope_scaling.factor = 40 but rope_parameters.factor = 32");
  j["rope_scaling"] = {{"type", "yarn"}};
  j["rope_parameters"] = {{"rope_type", "default"}};
  EXPECT_CONFIG_ERROR(j, R"(rope_scaling.type = "yarn" but rope_parameters.rope_type = "default")");
  j = TinyV3();
  j["rope_theta"] = 10000;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 50000}};
  EXPECT_CONFIG_ERROR(j, "contradictory rope_theta: 10000 at top level, 50000 in rope_parameters");
  j = TinyV3();
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2}};
  EXPECT_CONFIG_ERROR(j, "rope_type 'dynamic' is not supported: its frequencies follow the longest "
                         "sequence in each batch, so outputs would depend on the load");
  j["rope_scaling"] = {{"type", "su"}, {"factor", 2}};
  EXPECT_CONFIG_ERROR(j, "unsupported rope_type 'su' (supported: default, linear, llama3, yarn, "
                         "longrope)");
  j["rope_scaling"] = {{"type", "linear"}};
  EXPECT_CONFIG_ERROR(j, "config.json rope_scaling: linear needs 'factor'");
  j["rope_scaling"] = {{"type", "linear"}, {"factor", -2}};
  EXPECT_CONFIG_ERROR(j, "linear 'factor' must be positive");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 1},
                       {"high_freq_factor", 4}};
  EXPECT_CONFIG_ERROR(j, "llama3 needs 'original_max_position_embeddings'");
  j["rope_scaling"]["original_max_position_embeddings"] = 8192;
  j["rope_scaling"]["high_freq_factor"] = 1;
  EXPECT_CONFIG_ERROR(j, "llama3 needs 0 < low_freq_factor < high_freq_factor, got 1 and 1");
  j["rope_scaling"] = {{"type", "yarn"}, {"original_max_position_embeddings", 4096}};
  EXPECT_CONFIG_ERROR(j, "config.json rope_scaling: yarn needs 'factor'");
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 0}};
  EXPECT_CONFIG_ERROR(j, "yarn 'factor' must be positive");
  // A negative number of rotations made every rotary frequency NaN (transformers' math.log
  // raises on it); 0 is the default, as transformers' `beta_fast or 32` reads it.
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4}, {"beta_fast", -1}};
  EXPECT_CONFIG_ERROR(j, "yarn 'beta_fast' must be positive (0 or unstated: 32), got -1");
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4}, {"beta_slow", -0.5}};
  EXPECT_CONFIG_ERROR(j, "yarn 'beta_slow' must be positive (0 or unstated: 1), got -0.5");
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4}, {"beta_fast", 0}, {"beta_slow", 0}};
  EXPECT_DOUBLE_EQ(Parse(j).rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(Parse(j).rope.beta_slow, 1.0);
  j["rope_scaling"] = "yarn";
  EXPECT_CONFIG_ERROR(j, "'rope_scaling' must be an object");
}

TEST(ModelConfigTest, RejectsUnsupportedQuantization) {
  Json j = TinyV3();
  j["quantization_config"] = {{"quant_method", "compressed-tensors"}};
  EXPECT_CONFIG_ERROR(j, "unsupported quant_method 'compressed-tensors' (supported: fp8)");
  j["quantization_config"] = {
      {"quant_method", "fp8"}, {"fmt", "e5m2"}, {"weight_block_size", {128, 128}}};
  EXPECT_CONFIG_ERROR(j, "unsupported fp8 fmt 'e5m2'");
  for (const Json& bad : {Json::array({128}), Json::array({128, 128, 1}), Json::array({128.5, 128}),
                          Json("128x128")}) {
    j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", bad}};
    EXPECT_CONFIG_ERROR(j, "'weight_block_size' must be [rows, cols]");
  }
  j["quantization_config"] = {{"quant_method", "fp8"}};
  EXPECT_CONFIG_ERROR(j, "'weight_block_size' must be [rows, cols]");
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {0, 128}}};
  EXPECT_CONFIG_ERROR(j, "'weight_block_size' entries must be positive");
  j["quantization_config"] = {
      {"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"scale_fmt", "ue8m0"}};
  ModelConfig c = Parse(j.dump());
  EXPECT_EQ(c.quantization.scale_fmt, "ue8m0");
  EXPECT_EQ(c.quantization.activation_scheme, "dynamic");
  // transformers' FineGrainedFP8Config: the scheme lowercased, "dynamic" or "static" (static
  // activation scales latent does not read); scale_fmt "float" or "ue8m0".
  j["quantization_config"]["activation_scheme"] = "Dynamic";
  EXPECT_EQ(Parse(j.dump()).quantization.activation_scheme, "dynamic");
  j["quantization_config"]["activation_scheme"] = "static";
  EXPECT_CONFIG_ERROR(j, "activation_scheme 'static' is not supported");
  j["quantization_config"]["activation_scheme"] = "per_tensor";
  EXPECT_CONFIG_ERROR(j, "unknown activation_scheme 'per_tensor' (supported: dynamic)");
  j["quantization_config"]["activation_scheme"] = "dynamic";
  for (const char* ok : {"float", "ue8m0"}) {
    j["quantization_config"]["scale_fmt"] = ok;
    EXPECT_EQ(Parse(j.dump()).quantization.scale_fmt, ok);
  }
  j["quantization_config"]["scale_fmt"] = nullptr;
  EXPECT_EQ(Parse(j.dump()).quantization.scale_fmt, "");
  j["quantization_config"]["scale_fmt"] = "e8m0";
  EXPECT_CONFIG_ERROR(j, "unknown scale_fmt 'e8m0' (supported: float, ue8m0)");
}

TEST(ModelConfigTest, RejectsUnsupportedLayers) {
  Json j = TinyV3();
  j["hidden_act"] = "gelu";
  EXPECT_CONFIG_ERROR(j, "hidden_act 'gelu' is not supported (supported: silu)");
  j = TinyV3();
  j["attention_bias"] = true;
  EXPECT_CONFIG_ERROR(j, "'attention_bias' true is not supported");
  j = TinyV3();
  j["eos_token_id"] = {1, "2"};
  EXPECT_CONFIG_ERROR(j, "'eos_token_id' entries must be integers");
}

TEST(ModelConfigTest, RejectsFp8BlocksLargerThanAnySize) {
  // ceil(rows / block) overflowed for a block near INT64_MAX, making an empty scale tensor
  // pass validation; 2^64 - 1 wrapped to -1.
  Json j = TinyV3();
  for (const Json& bad : {Json::array({9223372036854775807, 16}),
                          Json::array({128, 18446744073709551615u}),
                          Json::array({int64_t{1} << 31, 128}), Json::array({-1, 128})}) {
    j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", bad}};
    EXPECT_CONFIG_ERROR(j, "'weight_block_size' entries must be positive and at most 2147483647");
  }
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {2147483647, 1}}};
  EXPECT_EQ(Parse(j).quantization.block_n, 2147483647);
}

TEST(ModelConfigTest, RejectsMoreExpertsThanAnyModel) {
  // The loader allocates one entry per routed expert and MoE layer: std::bad_alloc, not a message.
  Json j = TinyV3();
  j["n_routed_experts"] = int64_t{1} << 30;
  EXPECT_CONFIG_ERROR(j, "n_routed_experts (1073741824) x MoE layers (2) is more expert MLPs "
                         "than any model has (at most 1048576)");
  j["n_routed_experts"] = int64_t{1} << 40;
  EXPECT_CONFIG_ERROR(j, "field 'n_routed_experts' is 1099511627776, larger than any model");
  j["n_routed_experts"] = int64_t{1} << 20;  // one MoE layer's worth is fine, two are not
  EXPECT_CONFIG_ERROR(j, "x MoE layers (2) is more expert MLPs");
  j["first_k_dense_replace"] = 2;
  EXPECT_EQ(Parse(j).n_routed_experts, int64_t{1} << 20);
}

TEST(ModelConfigTest, RejectsSizesWhoseProductsOverflow) {
  Json j = TinyV3();
  j["n_shared_experts"] = int64_t{1} << 40;
  EXPECT_CONFIG_ERROR(j, "field 'n_shared_experts' is 1099511627776, larger than any model");
  j["n_shared_experts"] = 4;
  j["moe_intermediate_size"] = int64_t{1} << 30;
  EXPECT_CONFIG_ERROR(j, "n_shared_experts x the shared expert intermediate size is 4294967296");
  j = TinyV3();
  j["num_attention_heads"] = int64_t{1} << 30;
  EXPECT_CONFIG_ERROR(j, "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim + v_head_dim)"
                         " is 42949672960, larger than any model");
  j["num_attention_heads"] = 2147483647;
  j["qk_nope_head_dim"] = 2147483647;
  j["v_head_dim"] = 2147483647;
  EXPECT_CONFIG_ERROR(j, "v_head_dim) is past int64");
  j = TinyV3();
  j["model_type"] = "glm_moe_dsa";
  j["n_group"] = 1;
  j["topk_group"] = 1;
  for (const char* key : {"index_n_heads", "index_head_dim", "index_topk"}) {
    EXPECT_CONFIG_ERROR(With(j, key, int64_t{1} << 40),
                        StrCat("field '", key, "' is 1099511627776, larger than any model"));
    EXPECT_CONFIG_ERROR(With(j, key, 0), StrCat("field '", key, "' must be positive, got 0"));
  }
  j["index_n_heads"] = 1 << 20;
  j["index_head_dim"] = 1 << 20;
  EXPECT_CONFIG_ERROR(j, "index_n_heads x index_head_dim is 1099511627776, larger than any model");
}

TEST(ModelConfigTest, RejectsRopeThetaThatIsNotPositive) {
  // A theta of zero or less makes every rotary frequency NaN, and the output garbage.
  for (const Json& theta : {Json(0), Json(-10000.0), Json(0.0)}) {
    EXPECT_CONFIG_ERROR(With(TinyV3(), "rope_theta", theta), "field 'rope_theta' must be positive");
    Json j = TinyV3();
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", theta}};
    EXPECT_CONFIG_ERROR(j, "config.json rope_parameters: field 'rope_theta' must be positive");
  }
  EXPECT_CONFIG_ERROR(With(TinyV3(), "rope_theta", "10000"), "field 'rope_theta' must be a number");
}

TEST(ModelConfigTest, RejectsEosIdsOutsideTheVocabulary) {
  // transformers warns about a negative id and says nothing of one past the vocabulary; either
  // way no sampled token matches it and generation never stops. 2^64 - 1 would wrap to -1.
  for (const Json& eos : {Json(-1), Json(256), Json(18446744073709551615u), Json::array({1, 300}),
                          Json::array({-2})}) {
    EXPECT_CONFIG_ERROR(With(TinyV3(), "eos_token_id", eos), "is not a token id (vocab_size 256:");
  }
  EXPECT_CONFIG_ERROR(With(TinyV3(), "eos_token_id", 256),
                      "'eos_token_id' 256 is not a token id (vocab_size 256: ids are 0 to 255)");
  EXPECT_EQ(Parse(With(TinyV3(), "eos_token_id", Json::array({0, 255}))).eos_token_ids,
            (std::vector<int64_t>{0, 255}));
}

TEST(ModelConfigTest, RejectsBosIdsOutsideTheVocabulary) {
  // Checked as eos_token_id is (transformers only warns); null stays "no bos".
  for (const Json& bos : {Json(-1), Json(256), Json(1000000)}) {
    EXPECT_CONFIG_ERROR(With(TinyV3(), "bos_token_id", bos), "is not a token id (vocab_size 256:");
  }
  EXPECT_CONFIG_ERROR(With(TinyV3(), "bos_token_id", 256),
                      "'bos_token_id' 256 is not a token id (vocab_size 256: ids are 0 to 255)");
  EXPECT_EQ(Parse(With(TinyV3(), "bos_token_id", 255)).bos_token_id, 255);
}

TEST(ModelConfigTest, ReadsTheMtpLayerCount) {
  EXPECT_EQ(Parse(TinyV3()).num_mtp_layers, 0);
  EXPECT_EQ(Parse(With(TinyV3(), "num_nextn_predict_layers", 1)).num_mtp_layers, 1);
  EXPECT_EQ(Parse(With(TinyV3(), "num_mtp_layers", 2)).num_mtp_layers, 2);  // transformers' name
  EXPECT_EQ(Parse(With(TinyV3(), "num_nextn_predict_layers", -1)).num_mtp_layers, 0);
}

// Families whose every layer is DSA attention: layer_types, when stated, must list
// "indexed_attention" once per layer. transformers refuses another length
// ("num_hidden_layers (3) must be equal to the number of layer_types (2)").
TEST(ModelConfigTest, RejectsLayerTypesOfDsaFamiliesThatDoNotFit) {
  for (const char* type : {"deepseek_v32", "glm_moe_dsa"}) {
    Json j = TinyV3();
    j["model_type"] = type;
    j["n_group"] = 1;
    j["topk_group"] = 1;
    j["layer_types"] = {"indexed_attention", "indexed_attention", "indexed_attention"};
    EXPECT_TRUE(Parse(j).is_dsa()) << type;
    j["layer_types"] = {"indexed_attention", "indexed_attention"};
    EXPECT_CONFIG_ERROR(j, "'layer_types' must list one entry per layer (3), got 2 entries");
    j["layer_types"].push_back("indexed_attention");
    j["layer_types"].push_back("indexed_attention");
    EXPECT_CONFIG_ERROR(j, "'layer_types' must list one entry per layer (3), got 4 entries");
    j["layer_types"] = {"full_attention", "indexed_attention", "indexed_attention"};
    EXPECT_CONFIG_ERROR(j, std::string("'layer_types' entry 0 is \"full_attention\", but every ") +
                               type + " layer is \"indexed_attention\"");
    j["layer_types"] = "indexed_attention";
    EXPECT_CONFIG_ERROR(j, "'layer_types' must list one entry per layer (3)");
  }
}

TEST(ModelConfigTest, RejectsNegativeSharedExpertsInADenseModel) {
  // The sign was checked only after a dense config (no routed experts) had returned.
  Json j = TinyV3();
  j.erase("n_routed_experts");
  j["n_shared_experts"] = -1;
  EXPECT_CONFIG_ERROR(j, "field 'n_shared_experts' must be non-negative, got -1");
  j["n_routed_experts"] = -1;
  EXPECT_CONFIG_ERROR(j, "field 'n_routed_experts' must be non-negative, got -1");
}

TEST(ModelConfigTest, LoadNamesTheMissingFile) {
  try {
    ModelConfig::Load("/nonexistent-latent-dir");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-latent-dir/config.json: cannot open"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelConfigTest, ParsesDeepseekV32Dsa) {
  Json j = TinyV3();
  j["model_type"] = "deepseek_v32";
  j["index_n_heads"] = 4;
  j["index_head_dim"] = 16;
  j["index_topk"] = 8;
  j["mlp_layer_types"] = {"dense", "sparse", "dense"};
  const ModelConfig c = Parse(j.dump());
  EXPECT_EQ(c.architecture, "deepseek_v32");
  EXPECT_TRUE(c.is_dsa());
  EXPECT_TRUE(c.rope_interleave);  // V3.2 always interleaves the MLA rotary pairs.
  EXPECT_EQ(c.indexer_layers, (std::vector<bool>{true, true, true}));
  // mlp_layer_types wins over first_k_dense_replace.
  EXPECT_EQ(c.moe_layers, (std::vector<bool>{false, true, false}));
}

TEST(ModelConfigTest, ParsesGlmIndexShare) {
  Json j = TinyV3();
  j["model_type"] = "glm_moe_dsa";
  j["n_group"] = 1;
  j["topk_group"] = 1;
  j["num_hidden_layers"] = 8;
  j["index_topk_freq"] = 4;
  j["index_skip_topk_offset"] = 3;
  // GLM-5.2's schedule: full below 3, then every 4th from 2.
  EXPECT_EQ(Parse(j.dump()).indexer_layers,
            (std::vector<bool>{true, true, true, false, false, false, true, false}));
  j.erase("index_topk_freq");
  j["index_topk_pattern"] = "FSFSFSFS";
  EXPECT_EQ(Parse(j.dump()).indexer_layers,
            (std::vector<bool>{true, false, true, false, true, false, true, false}));
  // transformers takes a list as indexer_types itself.
  j["index_topk_pattern"] = {"full", "full", "shared", "full", "shared", "shared", "full", "full"};
  EXPECT_EQ(Parse(j.dump()).indexer_layers,
            (std::vector<bool>{true, true, false, true, false, false, true, true}));
  j.erase("index_topk_pattern");
  j["indexer_types"] = {"full", "shared", "shared", "full", "full", "full", "full", "shared"};
  EXPECT_EQ(Parse(j.dump()).indexer_layers[2], false);
}

TEST(ModelConfigTest, RejectsBadDsa) {
  Json j = TinyV3();
  j["model_type"] = "glm_moe_dsa";
  j["n_group"] = 1;
  j["topk_group"] = 1;
  j["indexer_types"] = {"shared", "full", "full"};
  EXPECT_CONFIG_ERROR(j, "layer 0 is a shared indexer layer");
  j["indexer_types"] = {"full", "sometimes", "full"};
  EXPECT_CONFIG_ERROR(j, "'indexer_types' entries must be");
  j["indexer_types"] = {"full"};
  EXPECT_CONFIG_ERROR(j, "'indexer_types' must list one entry per layer (3)");
  j.erase("indexer_types");
  j["index_topk_pattern"] = {"F", "S", "S"};  // a list holds indexer types, not letters
  EXPECT_CONFIG_ERROR(j, "'index_topk_pattern' entries must be \"shared\" or \"full\"");
  j.erase("index_topk_pattern");
  j["q_lora_rank"] = nullptr;
  EXPECT_CONFIG_ERROR(j, "glm_moe_dsa needs q_lora_rank");
  j["q_lora_rank"] = 32;
  j["index_head_dim"] = 4;
  EXPECT_CONFIG_ERROR(j, "index_head_dim (4) is smaller than qk_rope_head_dim (8)");
  j["index_head_dim"] = 16;
  j["mlp_layer_types"] = {"dense", "moe", "dense"};
  EXPECT_CONFIG_ERROR(j, "'mlp_layer_types' entries must be");
}

// A LongCat-Flash-Chat style config.json: LongCat's own key names, no rope_parameters.
constexpr const char* kLongcatFlash = R"({
  "architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash",
  "vocab_size": 131072, "hidden_size": 6144, "ffn_hidden_size": 12288,
  "expert_ffn_hidden_size": 2048, "num_layers": 28, "num_attention_heads": 64,
  "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
  "v_head_dim": 128, "mla_scale_q_lora": true, "mla_scale_kv_lora": true,
  "routed_scaling_factor": 6.0, "n_routed_experts": 512, "zero_expert_num": 256,
  "zero_expert_type": "identity", "moe_topk": 12, "max_position_embeddings": 131072,
  "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"
})";

TEST(ModelConfigTest, ParsesLongcatFlashNamesAndDefaults) {
  ModelConfig c = Parse(kLongcatFlash);
  EXPECT_EQ(c.architecture, "longcat_flash");
  EXPECT_EQ(c.num_hidden_layers, 28);  // logical layers, two MLA sublayers each
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.num_experts_per_tok, 12);
  EXPECT_EQ(c.n_routed_experts, 512);
  EXPECT_EQ(c.zero_expert_num, 256);
  EXPECT_EQ(c.n_shared_experts, 0);
  EXPECT_EQ(c.topk_method, TopkMethod::kGreedy);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSoftmax);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 6.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);  // transformers' LongcatFlashConfig default
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e7);     // its default_theta
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_DOUBLE_EQ(c.mla_q_scale, 2.0);                    // sqrt(6144 / 1536)
  EXPECT_DOUBLE_EQ(c.mla_latent_scale, std::sqrt(12.0));  // sqrt(6144 / 512)
  EXPECT_TRUE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(27));
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
}

TEST(ModelConfigTest, RejectsContradictoryLongcatFlashConfigs) {
  Json j = Json::parse(kLongcatFlash);
  j["num_hidden_layers"] = 28;
  EXPECT_CONFIG_ERROR(j, "num_hidden_layers (28) must be 2 * num_layers (56)");
  j["num_hidden_layers"] = 56;
  EXPECT_EQ(Parse(j.dump()).num_hidden_layers, 28);
  j = Json::parse(kLongcatFlash);
  j["moe_intermediate_size"] = 1024;
  EXPECT_CONFIG_ERROR(j, "contradictory 'expert_ffn_hidden_size' (2048) and 'moe_intermediate_size' (1024)");
  j = Json::parse(kLongcatFlash);
  j.erase("num_layers");
  EXPECT_CONFIG_ERROR(j, "missing required field 'num_layers'");
  j = Json::parse(kLongcatFlash);
  j["q_lora_rank"] = nullptr;
  EXPECT_CONFIG_ERROR(j, "longcat_flash needs q_lora_rank");
  j = Json::parse(kLongcatFlash);
  j["norm_topk_prob"] = true;
  EXPECT_CONFIG_ERROR(j, "norm_topk_prob true is not supported for longcat_flash");
  j = Json::parse(kLongcatFlash);
  j["zero_expert_num"] = nullptr;  // `zero_expert_num or 0`
  EXPECT_EQ(Parse(j.dump()).zero_expert_num, 0);
}

// A Ling 3 (bailing_hybrid) config.json under the hub's key names, written from transformers'
// BailingHybridConfig defaults (the Ling-3.0-Flash dims): head_dim is the KDA head here.
constexpr const char* kBailingHybrid = R"({
  "architectures": ["BailingHybridForCausalLM"], "model_type": "bailing_hybrid",
  "vocab_size": 157184, "hidden_size": 2560, "intermediate_size": 6144,
  "moe_intermediate_size": 768, "num_hidden_layers": 42, "num_attention_heads": 32,
  "num_key_value_heads": 32, "num_experts": 512, "num_experts_per_token": 8,
  "num_shared_experts": 1, "num_expert_group": 8, "topk_group": 4, "moe_renormalize": true,
  "routed_scaling_factor": 2.5, "first_k_dense_replace": 2, "kv_lora_rank": 512,
  "q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
  "head_dim": 128, "short_conv_kernel_size": 4, "layer_group_size": 6, "kda_safe_gate": true,
  "kda_lower_bound": -5.0, "model_max_length": 262144, "rms_norm_eps": 1e-06,
  "num_nextn_predict_layers": 1, "eos_token_id": 156895, "pad_token_id": 156892,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16"
})";

TEST(ModelConfigTest, ParsesBailingHybridNamesAndDefaults) {
  const ModelConfig c = Parse(kBailingHybrid);
  EXPECT_EQ(c.architecture, "bailing_hybrid");
  EXPECT_EQ(c.n_routed_experts, 512);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSigmoid);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  EXPECT_FALSE(c.q_lora_rank.has_value());
  EXPECT_DOUBLE_EQ(c.rope.theta, 6e6);  // the class default
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_EQ(c.linear_head_dim, 128);
  EXPECT_EQ(c.linear_num_heads, 32);
  EXPECT_EQ(c.linear_conv_kernel, 4);
  ASSERT_TRUE(c.linear_gate_lower_bound.has_value());
  EXPECT_DOUBLE_EQ(*c.linear_gate_lower_bound, -5.0);
  for (int64_t l = 0; l < 42; ++l) {
    EXPECT_EQ(c.IsLinearAttentionLayer(l), (l + 1) % 6 != 0) << "layer " << l;
    EXPECT_EQ(c.IsMoeLayer(l), l >= 2) << "layer " << l;
  }
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{156895});
}

TEST(ModelConfigTest, BailingHybridReadsTransformersOwnConfigJson) {
  // save_pretrained writes head_dim = qk_rope_head_dim and the KDA dims as linear_*, which win.
  Json j = Json::parse(kBailingHybrid);
  j["head_dim"] = 64;
  j["linear_head_dim"] = 96;
  j["linear_num_heads"] = 16;
  j["linear_conv_kernel_dim"] = 3;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  j["layer_types"] = Json::array();
  for (int l = 0; l < 42; ++l) j["layer_types"].push_back(l % 2 ? "full_attention" : "linear_attention");
  j["mlp_layer_types"] = Json::array();
  for (int l = 0; l < 42; ++l) j["mlp_layer_types"].push_back(l == 5 ? "dense" : "sparse");
  j["kda_safe_gate"] = false;
  const ModelConfig c = Parse(j.dump());
  EXPECT_EQ(c.linear_head_dim, 96);
  EXPECT_EQ(c.linear_num_heads, 16);
  EXPECT_EQ(c.linear_conv_kernel, 3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_FALSE(c.linear_gate_lower_bound.has_value());  // Kimi's softplus form
  for (int64_t l = 0; l < 42; ++l) {
    EXPECT_EQ(c.IsLinearAttentionLayer(l), l % 2 == 0) << "layer " << l;
    EXPECT_EQ(c.IsMoeLayer(l), l != 5) << "layer " << l;
  }
}

TEST(ModelConfigTest, RejectsBadBailingHybridConfigs) {
  Json j = Json::parse(kBailingHybrid);
  j.erase("num_experts");
  EXPECT_CONFIG_ERROR(j, "bailing_hybrid needs 'num_experts'");
  j = Json::parse(kBailingHybrid);
  j["num_local_experts"] = 256;
  EXPECT_CONFIG_ERROR(j, "'num_local_experts' (256) and 'n_routed_experts' (512) disagree");
  j = Json::parse(kBailingHybrid);
  j["kda_lower_bound"] = 0.0;
  EXPECT_CONFIG_ERROR(j, "'kda_lower_bound' must be negative");
  j = Json::parse(kBailingHybrid);
  j["layer_group_size"] = 0;
  EXPECT_CONFIG_ERROR(j, "'layer_group_size' must be positive");
  j = Json::parse(kBailingHybrid);
  j["layer_types"] = Json::array({"linear_attention", "mamba"});
  EXPECT_CONFIG_ERROR(j, "'layer_types' must list one entry per layer (42)");
  j["layer_types"] = Json::array();
  for (int l = 0; l < 42; ++l) j["layer_types"].push_back(l ? "linear_attention" : "sliding");
  EXPECT_CONFIG_ERROR(j, "'layer_types' entries must be \"full_attention\" or \"linear_attention\"");
  j = Json::parse(kBailingHybrid);
  j["short_conv_kernel_size"] = 1;
  EXPECT_CONFIG_ERROR(j, "a kernel of at least 2 taps");
  // Huge dims once wrapped the expected tensor shapes into negative dims.
  j = Json::parse(kBailingHybrid);
  j["linear_num_heads"] = int64_t{1} << 62;
  EXPECT_CONFIG_ERROR(j, "num_heads (4611686018427387904) and conv kernel taps (4) must each be "
                         "at most 4096");
  j = Json::parse(kBailingHybrid);
  j["linear_head_dim"] = INT64_MAX;
  EXPECT_CONFIG_ERROR(j, "linear attention head_dim (9223372036854775807)");
}

}  // namespace
}  // namespace latent::model
