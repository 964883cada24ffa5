#include "engine/batch_builder.h"

namespace latent::engine {

void BuildBatch(const SchedulePlan& plan, BuiltBatch& out) {
  model::ForwardBatch& f = out.forward;
  f.Clear();
  out.tables.clear();
  out.logits_index.clear();
  out.prompt_logits.clear();
  for (const ScheduledChunk& chunk : plan.chunks) {
    const Sequence& seq = *chunk.seq;
    const int32_t first_token = static_cast<int32_t>(f.token_ids.size());
    f.AddSequence(std::span<const int32_t>(seq.tokens).subspan(seq.num_computed, chunk.num_tokens),
                  seq.num_computed, seq.table.blocks(), seq.expanded_below, /*last_logits=*/false);
    f.prompt_lens.push_back(seq.num_prompt);
    if (seq.window_table) f.AddWindowTable(seq.window_table->blocks());
    f.state_slots.push_back(seq.state_slot);
    out.tables.push_back(&seq.table);
    // Prompt logprobs first: the rows of the prompt positions still to be reported.
    PromptLogitsRows prompt;
    if (seq.wants_prompt_logits()) {
      prompt.first_row = static_cast<int32_t>(f.logits_rows.size());
      prompt.count = static_cast<int32_t>(seq.PromptLogitsRows(seq.num_computed, chunk.num_tokens));
      prompt.first_position = seq.PromptLogitsFrom(seq.num_computed);
      for (int32_t r = 0; r < prompt.count; ++r) {
        f.logits_rows.push_back(
            static_cast<int32_t>(first_token + prompt.first_position - seq.num_computed + r));
      }
    }
    out.prompt_logits.push_back(prompt);
    // Then the last token's, when the chunk reaches the end of its sequence.
    const bool completes =
        seq.num_computed + chunk.num_tokens == static_cast<int64_t>(seq.tokens.size());
    if (completes) {
      out.logits_index.push_back(static_cast<int32_t>(f.logits_rows.size()));
      f.logits_rows.push_back(static_cast<int32_t>(f.token_ids.size() - 1));
    } else {
      out.logits_index.push_back(-1);
    }
  }
}

}  // namespace latent::engine
