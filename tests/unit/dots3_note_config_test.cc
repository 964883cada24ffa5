// dots3-note's config quirks (arch/dots3_note.cc): layer kinds derived as Dots3NoteTextConfig
// derives them (DSA at l < 2 or l % 4 == 1), the sliding layers' MLA shape from the released
// swa_* keys or per_layer_config, rope settings per layer type, and its cache rows (two latent
// widths, window retention on the sliding layers).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "config_test_util.h"
#include "model/cache_rows.h"
#include "model/model_config.h"

namespace latent::model {
namespace {

using config_test::Json;

Json TinyDots3() {
  return Json::parse(R"({"model_type": "dots3_note_text", "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 16, "num_hidden_layers": 6,
    "num_attention_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "index_head_dim": 16, "swa_num_attention_heads": 2, "swa_num_key_value_heads": 2,
    "swa_q_lora_rank": 24, "swa_kv_lora_rank": 20, "swa_head_dim": 22, "swa_qk_nope_head_dim": 16,
    "swa_v_head_dim": 12, "sliding_window_size": 32})");
}

using config_test::ErrorFor;
using config_test::Parse;

TEST(Dots3NoteConfigTest, ReleasedKeys) {
  const ModelConfig c = Parse(TinyDots3());
  EXPECT_EQ(c.architecture, "dots3_note");
  EXPECT_EQ(c.sliding_layers, (std::vector<bool>{false, false, true, true, true, false}));
  EXPECT_EQ(c.indexer_layers, (std::vector<bool>{true, true, false, false, false, true}));
  EXPECT_TRUE(c.dsa_causal_layers);  // the sliding layers attend their window
  EXPECT_EQ(c.sliding_window, 32);
  EXPECT_EQ(c.moe_layers, (std::vector<bool>{false, true, true, true, true, true}));
  EXPECT_DOUBLE_EQ(c.rope.theta, 80000000.0);
  EXPECT_DOUBLE_EQ(c.sliding_rope.theta, 50000.0);
  EXPECT_EQ(c.shared_expert_intermediate_size, 1536);
  const MlaLayerShape swa = c.LayerShape(2), dsa = c.LayerShape(0);
  EXPECT_EQ(swa.num_attention_heads, 2);
  EXPECT_EQ(swa.kv_lora_rank, 20);
  EXPECT_EQ(swa.qk_rope_head_dim, 6);  // swa_head_dim - swa_qk_nope_head_dim
  EXPECT_EQ(dsa.num_attention_heads, 4);
  EXPECT_EQ(dsa.qk_rope_head_dim, 8);
  const cache::ModelCacheRows rows = CacheRows(c, CacheDType::kBF16);
  ASSERT_EQ(rows[0].size(), 2u);  // latent + index key
  EXPECT_EQ(rows[0][0].values, 16 + 8);
  EXPECT_EQ(rows[0][0].retention, cache::Retention::kFull);
  ASSERT_EQ(rows[2].size(), 1u);
  EXPECT_EQ(rows[2][0].values, 20 + 6);
  EXPECT_EQ(rows[2][0].bytes_per_token, 2u * 26);
  EXPECT_EQ(rows[2][0].retention, cache::Retention::kWindow);
  EXPECT_EQ(rows[2][0].window_tokens, 32);
}

TEST(Dots3NoteConfigTest, PerLayerConfigAndNestedRope) {
  Json j = TinyDots3();
  j["layer_types"] = {"indexed_attention", "sliding_attention", "sliding_attention",
                      "full_attention", "sliding_attention", "indexed_attention"};
  const Json swa = {{"num_attention_heads", 3}, {"kv_lora_rank", 12}, {"head_dim", 20},
                    {"qk_nope_head_dim", 16}, {"v_head_dim", 8}, {"q_lora_rank", 20}};
  j["per_layer_config"] = {{"1", swa}, {"2", swa}, {"4", swa}};
  j["rope_parameters"] = {{"indexed_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 500.0},
                                                 {"partial_rotary_factor", 0.2}}}};
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.sliding_layers, (std::vector<bool>{false, true, true, false, true, false}));
  EXPECT_EQ(c.indexer_layers, (std::vector<bool>{true, false, false, false, false, true}));
  EXPECT_TRUE(c.dsa_causal_layers);  // layer 3 attends its whole causal prefix
  EXPECT_EQ(c.LayerShape(1).num_attention_heads, 3);
  EXPECT_EQ(c.LayerShape(1).qk_rope_head_dim, 4);
  EXPECT_EQ(c.LayerShape(3).num_attention_heads, 4);  // no entry: the top-level dims
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(c.sliding_rope.theta, 500.0);
}

TEST(Dots3NoteConfigTest, MoeLayerFreqAsANumberOrAList) {
  // Dots3NoteTextConfig: sparse from first_k_dense_replace on where moe_layer_freq divides l,
  // or, a list, where its entry is truthy (entries before first_k_dense_replace unread).
  Json j = TinyDots3();
  j["moe_layer_freq"] = 2;
  EXPECT_EQ(Parse(j).moe_layers, (std::vector<bool>{false, false, true, false, true, false}));
  j["moe_layer_freq"] = {1, 0, true, false, 2.5, 1};
  EXPECT_EQ(Parse(j).moe_layers, (std::vector<bool>{false, false, true, false, true, true}));
  j["first_k_dense_replace"] = 6;
  j["moe_layer_freq"] = Json::array();  // never indexed: every layer is dense
  EXPECT_EQ(Parse(j).moe_layers, std::vector<bool>(6, false));
  j["first_k_dense_replace"] = 3;
  EXPECT_NE(ErrorFor(j).find("'moe_layer_freq' lists 0 entries for 6 layers"), std::string::npos)
      << ErrorFor(j);
  j["moe_layer_freq"] = {1, 1, 1, "yes", 1, 1};
  EXPECT_NE(ErrorFor(j).find("'moe_layer_freq' entries must be numbers or booleans, got \"yes\""),
            std::string::npos) << ErrorFor(j);
  j["moe_layer_freq"] = nullptr;
  EXPECT_NE(ErrorFor(j).find("'moe_layer_freq' is null (transformers fails on it)"),
            std::string::npos) << ErrorFor(j);
  j.erase("moe_layer_freq");
  j["first_k_dense_replace"] = nullptr;
  EXPECT_NE(ErrorFor(j).find("'first_k_dense_replace' is null (transformers fails on it)"),
            std::string::npos) << ErrorFor(j);
}

TEST(Dots3NoteConfigTest, Refusals) {
  Json j = TinyDots3();
  j["swa_num_key_value_heads"] = 1;
  EXPECT_NE(ErrorFor(j).find("swa_num_key_value_heads (1) must equal"), std::string::npos) << ErrorFor(j);
  j = TinyDots3();
  j["rope_parameters"] = {{"sliding_attention", {{"rope_type", "yarn"}, {"rope_theta", 5.0}}}};
  EXPECT_NE(ErrorFor(j).find("not supported on sliding-window layers"), std::string::npos) << ErrorFor(j);
  j = TinyDots3();
  j["layer_types"] = {"indexed_attention", "windowed"};
  EXPECT_NE(ErrorFor(j).find("'layer_types' must list one entry per layer"), std::string::npos);
  j["layer_types"] = {"indexed_attention", "windowed", "x", "x", "x", "x"};
  EXPECT_NE(ErrorFor(j).find("'layer_types' entry 1"), std::string::npos) << ErrorFor(j);
  j = TinyDots3();
  j["rope_parameters"] = {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 0}}}};
  EXPECT_NE(ErrorFor(j).find("field 'rope_theta' must be positive"), std::string::npos)
      << ErrorFor(j);
  j = TinyDots3();
  j["per_layer_config"] = {{"1", {{"num_attention_heads", int64_t{1} << 30}}}};
  EXPECT_NE(ErrorFor(j).find("layer 1's num_attention_heads x (qk_head_dim + v_head_dim) is "),
            std::string::npos) << ErrorFor(j);
  j = TinyDots3();
  j["shared_experts_intermediate_size"] = int64_t{1} << 40;
  EXPECT_NE(ErrorFor(j).find("field 'shared_experts_intermediate_size' is 1099511627776"),
            std::string::npos) << ErrorFor(j);
  j = TinyDots3();
  j["sliding_window"] = 0;
  EXPECT_NE(ErrorFor(j).find("'sliding_window' must be positive"), std::string::npos) << ErrorFor(j);
}

}  // namespace
}  // namespace latent::model
