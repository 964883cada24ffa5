#include "engine/batch_builder.h"

namespace latent::engine {

void BuildBatch(const SchedulePlan& plan, BuiltBatch& out) {
  model::ForwardBatch& f = out.forward;
  f.token_ids.clear();
  f.positions.clear();
  f.seq_slots.clear();
  f.logits_rows.clear();
  out.tables.clear();
  out.logits_index.clear();
  for (size_t slot = 0; slot < plan.chunks.size(); ++slot) {
    const ScheduledChunk& chunk = plan.chunks[slot];
    const Sequence& seq = *chunk.seq;
    for (int64_t i = 0; i < chunk.num_tokens; ++i) {
      const int64_t position = seq.num_computed + i;
      f.token_ids.push_back(seq.tokens[position]);
      f.positions.push_back(position);
      f.seq_slots.push_back(static_cast<int32_t>(slot));
    }
    out.tables.push_back(&seq.table);
    const bool completes = seq.num_computed + chunk.num_tokens == static_cast<int64_t>(seq.tokens.size());
    if (completes) {
      out.logits_index.push_back(static_cast<int32_t>(f.logits_rows.size()));
      f.logits_rows.push_back(static_cast<int32_t>(f.token_ids.size() - 1));
    } else {
      out.logits_index.push_back(-1);
    }
  }
}

}  // namespace latent::engine
