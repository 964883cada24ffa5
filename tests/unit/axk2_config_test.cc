// A.X-K2's config quirks (arch/axk2.cc): AXK2Config's defaults, optional expert groups that must
// be set together, mlp_layer_types derived from first_k_dense_replace and moe_layer_freq (which
// AXK2Config honours), the gated norms' rank, and the tensor names the hub's checkpoints use.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "config_test_util.h"
#include "model/arch/registry.h"
#include "model/model_config.h"

namespace latent::model {
namespace {

using config_test::Json;

// The fields a config.json of A.X-K2 states (sizes tiny); the rest take AXK2Config's defaults.
Json TinyAxk2() {
  return Json::parse(R"({"model_type": "axk2", "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 16, "num_hidden_layers": 4,
    "num_attention_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2})");
}

using config_test::ErrorFor;
using config_test::With;
using config_test::Parse;

TEST(Axk2ConfigTest, Defaults) {
  const ModelConfig c = Parse(TinyAxk2());
  EXPECT_EQ(c.architecture, "axk2");
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_EQ(c.topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSigmoid);
  EXPECT_TRUE(c.router_dropped_groups_score_zero);
  EXPECT_EQ(c.n_group, 1);  // null: routing without groups
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.moe_layers, (std::vector<bool>{false, true, true, true}));  // first_k_dense_replace 1
  EXPECT_EQ(c.index_n_heads, 16);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 2048);
  EXPECT_EQ(c.indexer_layers, (std::vector<bool>(4, true)));
  EXPECT_EQ(c.gated_norm_rank, 16);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(*c.bos_token_id, 163691);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{163691}));
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
}

TEST(Axk2ConfigTest, ExpertGroupsAreSetTogether) {
  Json j = TinyAxk2();
  j["n_group"] = 4;
  j["topk_group"] = 2;
  ModelConfig c = Parse(j);
  EXPECT_EQ(c.n_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  j["n_group"] = nullptr;
  j["topk_group"] = nullptr;
  c = Parse(j);  // as A.X-K2-Light writes them
  EXPECT_EQ(c.n_group, 1);
  j["n_group"] = 4;
  EXPECT_CONFIG_ERROR(j, "n_group and topk_group must be set together");
  j.erase("n_group");
  j["topk_group"] = 2;
  EXPECT_CONFIG_ERROR(j, "n_group and topk_group must be set together");
}

TEST(Axk2ConfigTest, MoeLayerFreqPicksTheSparseLayers) {
  // AXK2Config: sparse where l >= first_k_dense_replace and l % moe_layer_freq == 0.
  Json j = TinyAxk2();
  j["first_k_dense_replace"] = 0;
  j["moe_layer_freq"] = 2;
  EXPECT_EQ(Parse(j).moe_layers, (std::vector<bool>{true, false, true, false}));
  j["first_k_dense_replace"] = 1;
  EXPECT_EQ(Parse(j).moe_layers, (std::vector<bool>{false, false, true, false}));
  j["moe_layer_freq"] = 1;
  EXPECT_EQ(Parse(j).moe_layers, (std::vector<bool>{false, true, true, true}));
  // An explicit list wins.
  j["moe_layer_freq"] = 2;
  j["mlp_layer_types"] = {"sparse", "sparse", "dense", "dense"};
  EXPECT_EQ(Parse(j).moe_layers, (std::vector<bool>{true, true, false, false}));
  j.erase("mlp_layer_types");
  j["moe_layer_freq"] = 0;
  EXPECT_CONFIG_ERROR(j, "'moe_layer_freq' must be positive");
  j["moe_layer_freq"] = -2;  // transformers reads -2 as 2; no checkpoint states it
  EXPECT_CONFIG_ERROR(j, "'moe_layer_freq' must be positive");
  // A stated null is no default to AXK2Config: its comparison with the layer index fails.
  j["moe_layer_freq"] = nullptr;
  EXPECT_CONFIG_ERROR(j, "'moe_layer_freq' is null (transformers fails on it)");
  j["moe_layer_freq"] = 2;
  j["first_k_dense_replace"] = nullptr;
  EXPECT_CONFIG_ERROR(j, "'first_k_dense_replace' is null (transformers fails on it)");
  j.erase("moe_layer_freq");
  EXPECT_CONFIG_ERROR(j, "'first_k_dense_replace' is null (transformers fails on it)");
  // Beside an explicit list the class reads neither.
  j["mlp_layer_types"] = {"sparse", "sparse", "dense", "dense"};
  j["moe_layer_freq"] = nullptr;
  EXPECT_EQ(Parse(j).moe_layers, (std::vector<bool>{true, true, false, false}));
}

TEST(Axk2ConfigTest, RefusesWhatTransformersRefuses) {
  Json j = TinyAxk2();
  j["q_lora_rank"] = nullptr;
  EXPECT_CONFIG_ERROR(j, "axk2 needs q_lora_rank");
  EXPECT_CONFIG_ERROR(With(TinyAxk2(), "gated_norm_rank", 0), "'gated_norm_rank' must be positive");
  j = TinyAxk2();
  j["n_group"] = 3;  // 8 experts
  j["topk_group"] = 1;
  EXPECT_CONFIG_ERROR(j, "not divisible by n_group");
  j["n_group"] = 2;
  j["topk_group"] = 3;
  EXPECT_CONFIG_ERROR(j, "topk_group (3) exceeds n_group (2)");
  // transformers' validate_layer_type refuses a list of another length.
  EXPECT_CONFIG_ERROR(With(TinyAxk2(), "layer_types", Json::array({"indexed_attention"})),
                      "'layer_types' must list one entry per layer (4), got 1 entries");
  EXPECT_CONFIG_ERROR(
      With(TinyAxk2(), "layer_types",
           Json::array({"indexed_attention", "sliding_attention", "indexed_attention",
                        "indexed_attention"})),
      "'layer_types' entry 1 is \"sliding_attention\", but every axk2 layer is");
}

TEST(Axk2ConfigTest, TensorNamesAreTheHubs) {
  const ModelConfig c = Parse(TinyAxk2());
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  ArchOf(c).tensors(c, ExpertLayout::kPerExpert, [&](const ExpectedWeight& w) {
    if (w.name.rfind("model.layers.1.", 0) == 0 && w.name.find("experts") == std::string::npos) {
      names.push_back(w.name);
      shapes.push_back(w.shape);
    }
  });
  const std::vector<std::string> expected = {
      "model.layers.1.input_layernorm.norm.weight",
      "model.layers.1.input_layernorm.W_down.weight",
      "model.layers.1.input_layernorm.W_up.weight",
      "model.layers.1.self_attn.q_a_proj.weight",
      "model.layers.1.self_attn.q_a_layernorm.weight",
      "model.layers.1.self_attn.q_b_proj.weight",
      "model.layers.1.self_attn.kv_a_proj_with_mqa.weight",
      "model.layers.1.self_attn.kv_a_layernorm.weight",
      "model.layers.1.self_attn.kv_b_proj.weight",
      "model.layers.1.self_attn.o_proj.weight",
      "model.layers.1.self_attn.indexer.wq_b.weight",
      "model.layers.1.self_attn.indexer.wk.weight",
      "model.layers.1.self_attn.indexer.k_norm.weight",
      "model.layers.1.self_attn.indexer.k_norm.bias",
      "model.layers.1.self_attn.indexer.weights_proj.weight",
      "model.layers.1.post_attention_layernorm.norm.weight",
      "model.layers.1.post_attention_layernorm.W_down.weight",
      "model.layers.1.post_attention_layernorm.W_up.weight",
      "model.layers.1.mlp.gate.weight",
      "model.layers.1.mlp.gate.e_score_correction_bias",
  };
  EXPECT_EQ(names, expected);
  EXPECT_EQ(shapes[1], (Shape{16, 64}));            // W_down [rank, D]
  EXPECT_EQ(shapes[2], (Shape{64, 16}));            // W_up [D, rank]
  EXPECT_EQ(shapes[5], (Shape{4 * (24 + 16), 64}));  // q_b_proj [H * (dqk + dv), 2Q]
}

}  // namespace
}  // namespace latent::model
