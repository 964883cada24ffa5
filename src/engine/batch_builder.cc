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
  out.prompt_logits.clear();
  for (size_t slot = 0; slot < plan.chunks.size(); ++slot) {
    const ScheduledChunk& chunk = plan.chunks[slot];
    const Sequence& seq = *chunk.seq;
    const int64_t first_token = static_cast<int64_t>(f.token_ids.size());
    for (int64_t i = 0; i < chunk.num_tokens; ++i) {
      const int64_t position = seq.num_computed + i;
      f.token_ids.push_back(seq.tokens[position]);
      f.positions.push_back(position);
      f.seq_slots.push_back(static_cast<int32_t>(slot));
    }
    out.tables.push_back(&seq.table);
    PromptLogitsRows prompt;
    if (seq.wants_prompt_logits()) {
      prompt.first_row = static_cast<int32_t>(f.logits_rows.size());
      prompt.count = static_cast<int32_t>(seq.PromptLogitsRows(seq.num_computed, chunk.num_tokens));
      prompt.first_position = seq.PromptLogitsFrom(seq.num_computed);
      for (int32_t r = 0; r < prompt.count; ++r) {
        f.logits_rows.push_back(static_cast<int32_t>(first_token + prompt.first_position - seq.num_computed + r));
      }
    }
    out.prompt_logits.push_back(prompt);
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
