// Turns a schedule into the flat arrays of one forward pass.
#pragma once

#include <vector>

#include "cache/block_table.h"
#include "engine/scheduler.h"
#include "model/model.h"

namespace latent::engine {

struct BuiltBatch {
  // token_ids/positions/seq_slots [T], logits_rows [R], seq_starts/context_lens and the
  // block-table rows per slot; forward.rows (the paged cache) is set by the owner and kept.
  model::ForwardBatch forward;
  std::vector<const cache::BlockTable*> tables;  // [slots]: slot i is plan.chunks[i]
  std::vector<int32_t> logits_index;           // [slots]: row in the logits, or -1 (mid-prefill)
};

// Slot i runs chunk i: the tokens [num_computed, num_computed + num_tokens) of its sequence at
// their absolute positions, with its block-table row. Only chunks that reach the end of their
// sequence produce logits (of their last token).
void BuildBatch(const SchedulePlan& plan, BuiltBatch& out);

}  // namespace latent::engine
