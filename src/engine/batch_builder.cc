#include "engine/batch_builder.h"

namespace latent::engine {

void BuildBatch(const SchedulePlan& plan, BuiltBatch& out) {
  model::ForwardBatch& f = out.forward;
  f.Clear();
  out.tables.clear();
  out.logits_index.clear();
  for (const ScheduledChunk& chunk : plan.chunks) {
    const Sequence& seq = *chunk.seq;
    const bool completes =
        seq.num_computed + chunk.num_tokens == static_cast<int64_t>(seq.tokens.size());
    out.logits_index.push_back(completes ? static_cast<int32_t>(f.logits_rows.size()) : -1);
    f.AddSequence(std::span<const int32_t>(seq.tokens).subspan(seq.num_computed, chunk.num_tokens),
                  seq.num_computed, seq.table.blocks(), /*last_logits=*/completes);
    out.tables.push_back(&seq.table);
  }
}

}  // namespace latent::engine
