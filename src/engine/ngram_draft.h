// Prompt-lookup drafts for speculative decoding: tokens guessed to follow a sequence, copied from
// where its latest tokens occurred before (in its prompt or its own output). Code edits, quoted
// context, retrieved documents and the loops of small models repeat what came before, and there
// the guess is often right. The engine verifies every draft token in the same forward that
// computes the sequence's pending token (engine.h), so a wrong guess costs compute, never output.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace latent::engine {

// Replaces `draft` with up to `max_tokens` tokens guessed to follow `tokens`: those that followed
// the latest earlier occurrence of the longest suffix of `tokens` that recurs, of ngram_max down
// to ngram_min tokens (vLLM's prompt_lookup_max and _min). A match near the end reads past it
// into the draft itself, so a loop of any period continues for the whole draft. Empty when no
// suffix of ngram_min tokens recurs. One pass over `tokens`, latest first.
void ProposeNgramDraft(std::span<const int32_t> tokens, int32_t ngram_min, int32_t ngram_max,
                       int32_t max_tokens, std::vector<int32_t>& draft);

}  // namespace latent::engine
