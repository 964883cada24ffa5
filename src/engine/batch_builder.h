// Turns a schedule into the flat arrays of one forward pass.
#pragma once

#include <vector>

#include "cache/block_table.h"
#include "engine/scheduler.h"
#include "model/model.h"

namespace latent::engine {

// The logits rows of one slot's prompt positions, for prompt logprobs: rows
// [first_row, first_row + count) of the logits are positions [first_position, + count).
struct PromptLogitsRows {
  int32_t first_row = 0;
  int32_t count = 0;  // 0: the slot asks for none (every request without prompt logprobs).
  int64_t first_position = 0;
};

struct BuiltBatch {
  // token_ids/positions/seq_slots [T], logits_rows [R], seq_starts/context_lens and the
  // block-table rows per slot; forward.rows (the paged cache) is set by the owner and kept.
  model::ForwardBatch forward;
  std::vector<const cache::BlockTable*> tables;  // [slots]: slot i is plan.chunks[i]
  // [slots]: row in the logits, or -1 (mid-prefill); a slot that runs a draft of d tokens has
  // d + 1 rows from there (its pending token's, then each draft token's).
  std::vector<int32_t> logits_index;
  std::vector<PromptLogitsRows> prompt_logits;  // [slots]
  std::vector<int32_t> draft_tokens;  // scratch: one drafted chunk's tokens
};

// Slot i runs chunk i: its sequence's tokens from num_computed (then, for a decode with a draft,
// the chunk's num_draft draft tokens) at their absolute positions, with its block-table row.
// Chunks that reach the end of their sequence produce the logits of their last token; a sequence
// that wants prompt logprobs also gets the rows of its prompt positions whose logprobs are still
// to be reported (before its last-token row). A decode that runs a draft gets the rows of every
// one of its tokens.
void BuildBatch(const SchedulePlan& plan, BuiltBatch& out);

}  // namespace latent::engine
