// ForwardBatch's bookkeeping (model.h).
#include "base/error.h"
#include "model/model.h"

namespace latent::model {

void ForwardBatch::Clear() {
  token_ids.clear();
  positions.clear();
  seq_slots.clear();
  logits_rows.clear();
  seq_starts.assign(1, 0);
  context_lens.clear();
  expanded_below.clear();
  block_table_starts.assign(1, 0);
  block_ids.clear();
  window_table_starts.assign(1, 0);
  window_block_ids.clear();
  prompt_lens.clear();
  state_slots.clear();
}

void ForwardBatch::AddSequence(std::span<const int32_t> tokens, int64_t first_position,
                               std::span<const cache::BlockId> table,
                               const cache::RegimeBounds& expanded_below_pos,
                               bool last_logits, bool all_logits) {
  LATENT_CHECK(!tokens.empty());
  if (seq_starts.empty()) seq_starts.push_back(0);
  if (block_table_starts.empty()) block_table_starts.push_back(0);
  const int32_t slot = static_cast<int32_t>(context_lens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    token_ids.push_back(tokens[i]);
    positions.push_back(first_position + static_cast<int64_t>(i));
    seq_slots.push_back(slot);
    if (all_logits || (last_logits && i + 1 == tokens.size())) {
      logits_rows.push_back(static_cast<int32_t>(token_ids.size() - 1));
    }
  }
  seq_starts.push_back(static_cast<int32_t>(token_ids.size()));
  context_lens.push_back(first_position + static_cast<int64_t>(tokens.size()));
  expanded_below.push_back(expanded_below_pos);
  block_ids.insert(block_ids.end(), table.begin(), table.end());
  block_table_starts.push_back(static_cast<int32_t>(block_ids.size()));
}

void ForwardBatch::Validate() const {
  const size_t tokens = token_ids.size();
  const size_t seqs = context_lens.size();
  LATENT_CHECK(positions.size() == tokens && seq_slots.size() == tokens);
  LATENT_CHECK(seq_starts.size() == seqs + 1 && block_table_starts.size() == seqs + 1);
  LATENT_CHECK(expanded_below.size() == seqs);
  LATENT_CHECK(seq_starts[0] == 0 && static_cast<size_t>(seq_starts[seqs]) == tokens);
  LATENT_CHECK(block_table_starts[0] == 0 &&
               static_cast<size_t>(block_table_starts[seqs]) == block_ids.size());
  LATENT_CHECK(rows != nullptr);
  LATENT_CHECK(prompt_lens.empty() || prompt_lens.size() == seqs);
  LATENT_CHECK(state_slots.empty() || state_slots.size() == seqs);
  for (size_t s = 0; s < seqs; ++s) {
    LATENT_CHECK(seq_starts[s] < seq_starts[s + 1]);
    for (int32_t t = seq_starts[s]; t < seq_starts[s + 1]; ++t) {
      LATENT_CHECK(seq_slots[t] == static_cast<int32_t>(s));
      LATENT_CHECK(t == seq_starts[s] || positions[t] == positions[t - 1] + 1);
    }
    LATENT_CHECK(context_lens[s] == positions[seq_starts[s + 1] - 1] + 1);
    const int64_t blocks = block_table_starts[s + 1] - block_table_starts[s];
    if (blocks * rows->block_tokens < context_lens[s]) {
      FailInternal("the block table of batch sequence ", s, " holds ", blocks * rows->block_tokens,
                   " positions, short of its context ", context_lens[s]);
    }
    if (rows->num_groups() > 1) {
      LATENT_CHECK(window_table_starts.size() == seqs + 1);
      const int64_t window_blocks = window_table_starts[s + 1] - window_table_starts[s];
      if (window_blocks * rows->GroupBlockTokens(1) < context_lens[s]) {
        FailInternal("the window block table of batch sequence ", s, " is short of its context ",
                     context_lens[s]);
      }
    }
  }
  for (int32_t r : logits_rows) LATENT_CHECK(r >= 0 && static_cast<size_t>(r) < tokens);
}

}  // namespace latent::model
