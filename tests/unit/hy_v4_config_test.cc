// Hy4's config quirks (arch/hy_v4.cc): HYV4Config's defaults (rms eps 1e-5, rotate-half rope,
// the indexer's full/shared pattern, hyper-connections, the SwiGLU clamp), what the family
// refuses, and the tensor names save_pretrained writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "config_test_util.h"
#include "model/arch/registry.h"
#include "model/model_config.h"
#include "model/weight_table.h"

namespace latent::model {
namespace {

using config_test::Json;

// The fields a config.json of Hy4 states (sizes tiny); the rest take HYV4Config's defaults.
Json TinyHyV4() {
  return Json::parse(R"({"model_type": "hy_v4", "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 16, "num_hidden_layers": 7,
    "num_attention_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2})");
}

using config_test::ErrorFor;
using config_test::With;
using config_test::Parse;

TEST(HyV4ConfigTest, Defaults) {
  const ModelConfig c = Parse(TinyHyV4());
  EXPECT_EQ(c.architecture, "hy_v4");
  EXPECT_FALSE(c.rope_interleave);  // rotate-half
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSigmoid);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.827);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.moe_layers, (std::vector<bool>{false, true, true, true, true, true, true}));
  EXPECT_EQ(c.index_n_heads, 16);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 2048);
  // Full at layer 0 and where (l - 1) % 4 == 0.
  EXPECT_EQ(c.indexer_layers, (std::vector<bool>{true, true, false, false, false, true, false}));
  EXPECT_TRUE(c.index_rope_last);
  EXPECT_DOUBLE_EQ(c.index_k_norm_eps, 1e-5);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_DOUBLE_EQ(c.hc_magnitude, 2.0);
  EXPECT_DOUBLE_EQ(c.hc_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.bos_token_id, 120000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{120025}));
}

TEST(HyV4ConfigTest, StatedFields) {
  Json j = TinyHyV4();
  j["indexer_types"] = {"full", "shared", "full", "shared", "shared", "full", "shared"};
  j["hc_mult"] = 3;
  j["hc_magnitude"] = 1.5;
  j["swiglu_limit"] = 7.5;
  j["rms_norm_eps"] = 1e-6;
  j["mlp_layer_types"] = {"dense", "dense", "sparse", "sparse", "dense", "sparse", "sparse"};
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.indexer_layers, (std::vector<bool>{true, false, true, false, false, true, false}));
  EXPECT_EQ(c.hc_mult, 3);
  EXPECT_DOUBLE_EQ(c.hc_magnitude, 1.5);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 7.5);
  EXPECT_DOUBLE_EQ(c.index_k_norm_eps, 1e-6);
  EXPECT_EQ(c.moe_layers, (std::vector<bool>{false, false, true, true, false, true, true}));
}

TEST(HyV4ConfigTest, Refusals) {
  Json j = TinyHyV4();
  j["hc_mult"] = 0;
  EXPECT_CONFIG_ERROR(j, "'hc_mult' must be positive");
  // A huge stream count once wrapped the expected gate shapes into negative dims.
  EXPECT_CONFIG_ERROR(With(TinyHyV4(), "hc_mult", int64_t{1} << 62),
                      "'hc_mult' is 4611686018427387904, more residual streams than any model has "
                      "(at most 64)");
  EXPECT_EQ(Parse(With(TinyHyV4(), "hc_mult", 64)).hc_mult, 64);
  EXPECT_CONFIG_ERROR(With(TinyHyV4(), "indexer_types", std::vector<std::string>(7, "shared")),
                      "layer 0 is a shared indexer layer");
  j = TinyHyV4();
  j["layer_types"] = std::vector<std::string>(7, "sliding_attention");
  EXPECT_CONFIG_ERROR(j, "'layer_types' entry 0 is \"sliding_attention\", but every hy_v4 layer "
                         "is \"indexed_attention\"");
  EXPECT_CONFIG_ERROR(With(TinyHyV4(), "q_lora_rank", nullptr), "needs q_lora_rank");
  // transformers' docstring says <= 0 disables the clamp; its experts clamp there anyway.
  EXPECT_CONFIG_ERROR(With(TinyHyV4(), "swiglu_limit", 0.0), "'swiglu_limit' must be positive");
}

TEST(HyV4ConfigTest, TensorNames) {
  const ModelConfig c = Parse(TinyHyV4());
  std::vector<std::string> names;
  for (const ExpectedWeight& w : ExpectedWeights(c, ExpertLayout::kFused)) names.push_back(w.name);
  auto has = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (const char* name : {"model.layers.0.hc_pre.hc_attn_layer.hc_fn",
                           "model.layers.0.hc_pre.hc_mlp_layer.hc_scale",
                           "model.layers.0.self_attn.linear_gate.weight",
                           "model.layers.0.self_attn.learnable_sink_param",
                           "model.layers.0.mlp.linear_gate.weight",
                           "model.layers.1.mlp.shared_experts.linear_gate.weight",
                           "model.layers.1.mlp.experts.gate_up_proj",
                           "model.layers.1.self_attn.indexer.wq_b.weight",
                           "model.hc_pre.hc_head.hc_head_fn", "lm_head.weight"}) {
    EXPECT_TRUE(has(name)) << name;
  }
  EXPECT_FALSE(has("model.layers.2.self_attn.indexer.wq_b.weight"));  // a shared layer
}

}  // namespace
}  // namespace latent::model
