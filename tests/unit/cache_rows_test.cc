// One description of the cache rows: the rows each family's arch file declares (values and bytes
// together), and a per-sequence row (the retention kind linear-attention layers will use), which
// takes no per-token bytes in the block layout.
#include "model/cache_rows.h"

#include <gtest/gtest.h>

#include <string>

#include "cache/cache_layout.h"
#include "cache/cache_row_spec.h"
#include "model/model_config.h"

namespace latent::model {
namespace {

// A tiny config of `model_type` with DSA keys (read only by the DSA families).
ModelConfig Tiny(const std::string& model_type, const std::string& extra = "") {
  return ModelConfig::FromJson(R"({"model_type": ")" + model_type + R"(", "vocab_size": 64,
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 2,
    "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
    "v_head_dim": 8, "index_n_heads": 2, "index_head_dim": 8, "index_topk": 4)" + extra + "}",
                               model_type);
}

TEST(CacheRows, FamiliesDeclareTheirRowsWithValuesAndBytes) {
  const cache::ModelCacheRows v3 = CacheRows(Tiny("deepseek_v3"), CacheDType::kBF16);
  ASSERT_EQ(v3.size(), 4u);
  for (const auto& layer : v3) {
    ASSERT_EQ(layer.size(), 1u);
    EXPECT_EQ(layer[0].name, "mla.latent");
    EXPECT_EQ(layer[0].values, 16 + 4);
    EXPECT_EQ(layer[0].bytes_per_token, 2u * 20);
    EXPECT_EQ(layer[0].retention, cache::Retention::kFull);
  }
  const cache::ModelCacheRows v32 = CacheRows(Tiny("deepseek_v32"), CacheDType::kF32);
  for (const auto& layer : v32) {
    ASSERT_EQ(layer.size(), 2u);
    EXPECT_EQ(layer[1].name, "dsa.index_k");
    EXPECT_EQ(layer[1].values, 8);
    EXPECT_EQ(layer[1].bytes_per_token, 4u * 8);
  }
  // GLM IndexShare: only the layers with their own indexer cache its key.
  const ModelConfig glm = Tiny("glm_moe_dsa", R"(, "indexer_types": ["full", "shared", "full", "shared"])");
  const cache::ModelCacheRows rows = CacheRows(glm, CacheDType::kF32);
  const std::vector<std::vector<int64_t>> values = CacheRowValues(glm);
  ASSERT_EQ(values.size(), 4u);
  for (size_t l = 0; l < 4; ++l) {
    EXPECT_EQ(rows[l].size(), l % 2 == 0 ? 2u : 1u) << l;
    ASSERT_EQ(values[l].size(), rows[l].size());
    for (size_t r = 0; r < rows[l].size(); ++r) EXPECT_EQ(values[l][r], rows[l][r].values);
  }
}

TEST(CacheRows, Fp8RowsMatchDeepseekLayout) {
  // DeepSeek V3 dims: 512 latent values in e4m3 + 4 f32 scales + 64 bf16 rotary values = 656.
  ModelConfig c = Tiny("deepseek_v3");
  c.kv_lora_rank = 512;
  c.qk_rope_head_dim = 64;
  EXPECT_EQ(MlaLatentRow(c, CacheDType::kFP8).bytes_per_token, 656u);
  c.index_head_dim = 128;
  EXPECT_EQ(DsaIndexKeyRow(c, CacheDType::kFP8).bytes_per_token, 132u);
}

TEST(CacheRowSpec, PerSequenceRowTakesNoBlockBytes) {
  cache::CacheRowSpec latent{"mla.latent", 40};
  cache::CacheRowSpec state;
  state.name = "linear.state";
  state.retention = cache::Retention::kPerSequence;
  state.values = 2 * 16 * 16;
  state.bytes_per_sequence = 4 * 2 * 16 * 16;
  const cache::ModelCacheRows with_state = {{latent}, {latent, state}};
  const cache::ModelCacheRows without = {{latent}, {latent}};
  EXPECT_EQ(cache::BytesPerToken(with_state), 80u);
  const cache::CacheLayout a = cache::CacheLayout::Build(with_state, 16);
  const cache::CacheLayout b = cache::CacheLayout::Build(without, 16);
  EXPECT_EQ(a.block_bytes, b.block_bytes);
  ASSERT_EQ(a.slab_offset[1].size(), 2u);
  EXPECT_EQ(a.slab_offset[1][0], b.slab_offset[1][0]);
}

}  // namespace
}  // namespace latent::model
