// A small fake model for engine tests (one layer, a 64-token vocabulary) that writes and reads
// real cache rows, so the paged cache and the block pool are exercised as in serving: each
// token's cached row holds its id, and a logits row favours (the sum of the ids its sequence has
// cached up to it) mod vocab, so the output depends on what the cache holds. A row that was never
// written, or written by another request, changes the tokens that follow.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"

namespace latent::engine::testing {

// The config of the engine tests' fake models: one tiny MLA layer (rows of 8 values) and a
// vocabulary of `vocab` tokens.
inline model::ModelConfig FakeMlaConfig(int64_t vocab) {
  model::ModelConfig c;
  c.model_type = "deepseek_v3";
  c.architecture = "deepseek_v3";
  c.vocab_size = vocab;
  c.hidden_size = 8;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 1;
  c.max_position_embeddings = 4096;
  c.kv_lora_rank = 6;
  c.qk_nope_head_dim = 2;
  c.qk_rope_head_dim = 2;
  c.v_head_dim = 2;
  c.moe_layers = {false};
  c.dtype = "float32";
  return c;
}

class FakeCacheModel : public model::Model {
 public:
  const model::ModelConfig& config() const override { return c_; }

  // With fail set, a forward whose batch holds fail_on_token breaks halfway: it writes rows
  // that a whole forward would not write (each id + 1, as a forward that stopped at some layer
  // leaves rows no one computed), then calls fail, which throws.
  int32_t fail_on_token = -1;
  std::function<void()> fail;

  void Forward(const model::ForwardBatch& batch, model::AttentionForm, float* logits,
               model::ForwardTrace*) const override {
    const bool fails = fail && std::find(batch.token_ids.begin(), batch.token_ids.end(),
                                         fail_on_token) != batch.token_ids.end();
    const cache::PagedRows& cache = *batch.rows;
    const int64_t width = c_.kv_lora_rank + c_.qk_rope_head_dim;
    std::vector<float> row(width);
    for (size_t t = 0; t < batch.token_ids.size(); ++t) {
      std::fill(row.begin(), row.end(), float(batch.token_ids[t] + (fails ? 1 : 0)));
      cache.WriteRow(batch.BlockTable(batch.seq_slots[t]), 0, model::kLatentRow, batch.positions[t],
                     row.data());
    }
    if (fails) fail();
    std::vector<float> rows;
    for (size_t r = 0; r < batch.logits_rows.size(); ++r) {
      const int32_t t = batch.logits_rows[r];
      const int64_t count = batch.positions[t] + 1;
      rows.resize(count * width);
      cache.GatherRows(batch.BlockTable(batch.seq_slots[t]), 0, model::kLatentRow, count,
                       rows.data());
      int64_t sum = 0;
      for (int64_t p = 0; p < count; ++p) sum += static_cast<int64_t>(rows[p * width]);
      float* out = logits + r * c_.vocab_size;
      for (int64_t v = 0; v < c_.vocab_size; ++v) out[v] = float(v % 7) * 0.1f;
      out[sum % c_.vocab_size] = 5.0f;
    }
  }

 private:
  model::ModelConfig c_ = FakeMlaConfig(64);
};

}  // namespace latent::engine::testing
