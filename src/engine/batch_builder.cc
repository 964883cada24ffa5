#include "engine/batch_builder.h"

#include "base/error.h"

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
    const int64_t own = chunk.own_tokens();
    std::span<const int32_t> tokens =
        std::span<const int32_t>(seq.tokens).subspan(seq.num_computed, own);
    if (chunk.num_draft > 0) {
      // The pending token, then the draft: each position's logits verify the next one's token.
      out.draft_tokens.assign(tokens.begin(), tokens.end());
      out.draft_tokens.insert(out.draft_tokens.end(), seq.draft.begin(),
                              seq.draft.begin() + chunk.num_draft);
      tokens = out.draft_tokens;
    }
    const int32_t first_row = static_cast<int32_t>(f.logits_rows.size());
    f.AddSequence(tokens, seq.num_computed, seq.table.blocks(), seq.expanded_below,
                  /*last_logits=*/false, /*all_logits=*/chunk.num_draft > 0);
    f.prompt_lens.push_back(seq.num_prompt);
    if (seq.window_table) f.AddWindowTable(seq.window_table->blocks());
    f.state_slots.push_back(seq.state_slot);
    out.tables.push_back(&seq.table);
    // Prompt logprobs first: the rows of the prompt positions still to be reported.
    PromptLogitsRows prompt;
    if (seq.wants_prompt_logits()) {
      prompt.first_row = static_cast<int32_t>(f.logits_rows.size());
      prompt.count = static_cast<int32_t>(seq.PromptLogitsRows(seq.num_computed, own));
      prompt.first_position = seq.PromptLogitsFrom(seq.num_computed);
      for (int32_t r = 0; r < prompt.count; ++r) {
        f.logits_rows.push_back(
            static_cast<int32_t>(first_token + prompt.first_position - seq.num_computed + r));
      }
    }
    out.prompt_logits.push_back(prompt);
    // Then the last token's, when the chunk reaches the end of its sequence (a draft's rows
    // are all there already: the pending token's first).
    const bool completes = seq.num_computed + own == static_cast<int64_t>(seq.tokens.size());
    if (chunk.num_draft > 0) {
      LATENT_CHECK(prompt.count == 0);  // a decode: its prompt's logits are all reported
      out.logits_index.push_back(first_row);
    } else if (completes) {
      out.logits_index.push_back(static_cast<int32_t>(f.logits_rows.size()));
      f.logits_rows.push_back(static_cast<int32_t>(f.token_ids.size() - 1));
    } else {
      out.logits_index.push_back(-1);
    }
  }
}

}  // namespace latent::engine
