// GLM-5-Next's config quirks (arch/glm5_next.cc): Glm5NextTextConfig's defaults (KDA on
// l % 4 != 3, no rotary part, the KPool indexer, mHC, the SwiGLU clamp on every MLP), the
// vision-language wrapper, what the family refuses, its tensor names and its cache rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "config_test_util.h"
#include "model/arch/registry.h"
#include "model/cache_rows.h"
#include "model/model_config.h"
#include "model/weight_table.h"

namespace latent::model {
namespace {

using config_test::Json;

// The fields a glm5_next_text config states (sizes tiny); the rest take the class defaults.
Json TinyText() {
  return Json::parse(R"({"model_type": "glm5_next_text", "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 16, "num_hidden_layers": 8,
    "num_attention_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 0, "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "linear_head_dim": 8, "linear_num_heads": 2, "index_head_dim": 16, "index_n_heads": 4,
    "index_topk": 64})");
}

using config_test::ErrorFor;
using config_test::With;
using config_test::Parse;

TEST(Glm5NextConfigTest, Defaults) {
  const ModelConfig c = Parse(TinyText());
  EXPECT_EQ(c.architecture, "glm5_next");
  EXPECT_EQ(c.qk_rope_head_dim, 0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSigmoid);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.moe_layers, (std::vector<bool>{false, false, false, true, true, true, true, true}));
  EXPECT_EQ(c.linear_attention_layers, (std::vector<bool>{true, true, true, false, true, true, true, false}));
  // Only the MLA layers run an indexer.
  EXPECT_EQ(c.indexer_layers, (std::vector<bool>{false, false, false, true, false, false, false, true}));
  EXPECT_EQ(c.index_kpool, 16);
  EXPECT_DOUBLE_EQ(c.linear_gate_lower_bound.value_or(0.0), -5.0);
  EXPECT_EQ(c.linear_conv_kernel, 4);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_DOUBLE_EQ(c.hc_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_TRUE(c.swiglu_limit_all_mlps);
  EXPECT_FALSE(c.bos_token_id.has_value());
}

TEST(Glm5NextConfigTest, StatedFieldsAndTheWrapper) {
  Json text = TinyText();
  text["layer_types"] = {"linear_attention", "full_attention", "indexed_attention", "linear_attention",
                         "linear_attention", "linear_attention", "linear_attention", "indexed_attention"};
  text["indexer_types"] = {"full", "full", "shared", "full", "full", "full", "full", "full"};
  text["linear_attn_config"] = {{"head_dim", 12}, {"num_heads", 3}, {"short_conv_kernel_size", 3},
                                {"gate_lower_bound", -3.0}};
  text["linear_lower_bound"] = -7.0;  // linear_attn_config wins
  text["hc_sinkhorn_iters"] = 5;
  const Json wrapper = {{"model_type", "glm5_next"}, {"text_config", text}, {"tie_word_embeddings", false}};
  const ModelConfig c = Parse(wrapper);
  EXPECT_EQ(c.wrapper_model_type, "glm5_next");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.linear_attention_layers, (std::vector<bool>{true, false, false, true, true, true, true, false}));
  EXPECT_EQ(c.indexer_layers, (std::vector<bool>{false, true, false, false, false, false, false, true}));
  EXPECT_EQ(c.linear_head_dim, 12);
  EXPECT_EQ(c.linear_num_heads, 3);
  EXPECT_EQ(c.linear_conv_kernel, 3);
  EXPECT_DOUBLE_EQ(c.linear_gate_lower_bound.value_or(0.0), -3.0);
  EXPECT_EQ(c.hc_sinkhorn_iters, 5);
  // A null bound: Kimi's unbounded softplus gate.
  text = TinyText();
  text["linear_lower_bound"] = nullptr;
  EXPECT_FALSE(Parse(text).linear_gate_lower_bound.has_value());
}

// save_pretrained writes quantization_config at the wrapper's top level; transformers reads the
// text config's only when the wrapper states none, and the wrapper's when both do.
TEST(Glm5NextConfigTest, TheWrappersQuantizationConfig) {
  const auto fp8 = [](int64_t block) {
    return Json{{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {block, block}}};
  };
  Json wrapper = {{"model_type", "glm5_next"}, {"text_config", TinyText()},
                  {"quantization_config", fp8(16)}};
  ModelConfig c = Parse(wrapper);
  EXPECT_TRUE(c.quantization.fp8);
  EXPECT_EQ(c.quantization.block_n, 16);
  EXPECT_EQ(c.quantization.block_k, 16);
  wrapper["text_config"]["quantization_config"] = fp8(32);
  EXPECT_EQ(Parse(wrapper).quantization.block_n, 16);
  // The text config's is not read at all beside the wrapper's, as in transformers.
  wrapper["text_config"]["quantization_config"] = {{"quant_method", "awq"}};
  EXPECT_EQ(Parse(wrapper).quantization.block_k, 16);
  wrapper.erase("quantization_config");
  EXPECT_CONFIG_ERROR(wrapper, "unsupported quant_method 'awq'");
  wrapper["text_config"]["quantization_config"] = fp8(32);
  EXPECT_EQ(Parse(wrapper).quantization.block_n, 32);
  wrapper["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {0, 16}}};
  EXPECT_CONFIG_ERROR(wrapper, "'weight_block_size' entries must be positive");
}

TEST(Glm5NextConfigTest, Refusals) {
  EXPECT_CONFIG_ERROR(With(TinyText(), "qk_rope_head_dim", 8), "qk_rope_head_dim must be 0");
  EXPECT_CONFIG_ERROR(With(TinyText(), "index_topk", 40), "must be divisible by index_kpool");
  EXPECT_CONFIG_ERROR(With(TinyText(), "index_kpool_always_select_tail", false),
                      "index_kpool_always_select_tail false is not supported");
  EXPECT_CONFIG_ERROR(With(TinyText(), "indexer_types",
                           {"full", "full", "full", "shared", "full", "full", "full", "full"}),
                      "layer 3 is a shared indexer layer, but layer 2 is not an MLA layer");
  EXPECT_CONFIG_ERROR(With(TinyText(), "layer_types",
                           std::vector<std::string>(8, "sliding_attention")),
                      "'layer_types' entry 0 must be");
  EXPECT_CONFIG_ERROR(With(TinyText(), "hc_sinkhorn_iters", 0),
                      "'hc_sinkhorn_iters' must be from 1 to 10000, got 0");
  // Run per block per token: 2^31 iterations stalled every step.
  EXPECT_CONFIG_ERROR(With(TinyText(), "hc_sinkhorn_iters", int64_t{1} << 31),
                      "'hc_sinkhorn_iters' must be from 1 to 10000, got 2147483648");
  // Huge sizes once wrapped the expected tensor shapes into negative dims.
  EXPECT_CONFIG_ERROR(With(TinyText(), "hc_mult", int64_t{1} << 62),
                      "'hc_mult' is 4611686018427387904, more residual streams than any model");
  EXPECT_CONFIG_ERROR(With(TinyText(), "linear_num_heads", INT64_MAX),
                      "linear attention head_dim (8), num_heads (9223372036854775807) and conv "
                      "kernel taps (4) must each be at most 4096");
  EXPECT_CONFIG_ERROR(With(TinyText(), "linear_head_dim", 0),
                      "linear attention needs positive head_dim");
  EXPECT_CONFIG_ERROR(With(TinyText(), "linear_lower_bound", 1.0),
                      "'linear_lower_bound' must be negative");
}

TEST(Glm5NextConfigTest, TensorNamesAndCacheRows) {
  const ModelConfig c = Parse(TinyText());
  std::vector<std::string> names;
  for (const ExpectedWeight& w : ExpectedWeights(c, ExpertLayout::kPerExpert)) names.push_back(w.name);
  auto has = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (const char* name : {"model.layers.0.hc_attn_fn", "model.layers.0.hc_ffn_scale",
                           "model.layers.0.self_attn.q_conv1d.weight", "model.layers.0.self_attn.A_log",
                           "model.layers.0.mlp.gate_proj.weight",
                           "model.layers.3.self_attn.indexer.index_kpool_compress_ape",
                           "model.layers.3.self_attn.indexer.index_kpool_compress_gate",
                           "model.layers.3.self_attn.kv_a_proj_with_mqa.weight",
                           "model.layers.3.mlp.experts.7.down_proj.weight", "lm_head.weight"}) {
    EXPECT_TRUE(has(name)) << name;
  }
  EXPECT_FALSE(has("model.layers.0.self_attn.indexer.wk.weight"));  // a KDA layer
  const cache::ModelCacheRows rows = CacheRows(c, CacheDType::kBF16);
  ASSERT_EQ(rows[3].size(), 2u);
  EXPECT_EQ(rows[3][0].name, "mla.latent");
  EXPECT_EQ(rows[3][0].values, 16);  // NoPE: kv_lora_rank only
  EXPECT_EQ(rows[3][1].name, "dsa.kpool");
  EXPECT_EQ(rows[3][1].values, 32);  // key | gate score
  EXPECT_EQ(rows[3][1].bytes_per_token, 64u);
  ASSERT_EQ(rows[0].size(), 3u);
  EXPECT_EQ(rows[0][1].name, "kda.state");
}

}  // namespace
}  // namespace latent::model
