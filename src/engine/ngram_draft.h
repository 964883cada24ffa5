// Prompt-lookup drafts for speculative decoding: tokens guessed to follow a sequence, copied from
// where its latest tokens occurred before (in its prompt or its own output). Code edits, quoted
// context, retrieved documents and the loops of small models repeat what came before, and there
// the guess is often right. The engine verifies every draft token in the same forward that
// computes the sequence's pending token (engine.h), so a wrong guess costs compute, never output.
#pragma once

#include <cstdint>
#include <limits>
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

// A sequence's draft length, adapted to how its drafts fared, so that text that does not repeat
// the way its n-grams suggest wastes few rows (each wrong draft token costs a row of every
// linear, the vocabulary-wide lm head's included): a draft that proved right in full lets the
// next be twice as long (up to the maximum; never shorter than the last limit); one rejected
// part-way is cut to one past what proved right; one rejected at its first token pauses drafting
// for 1, 2, 4 ... 32 decode steps, then probes with one token (any accepted token resets the
// pause).
struct DraftPace {
  static constexpr int32_t kLongestPause = 32;
  int64_t limit = std::numeric_limits<int32_t>::max();  // longest next draft
  int32_t pause = 0;                                     // decode steps left without a draft
  int32_t backoff = 1;                                   // the next pause

  // The longest draft to propose at this decode step, at most `max_tokens` (0 while paused:
  // the step counts).
  int64_t Next(int64_t max_tokens);
  // The last draft: `drafted` tokens run, the first `accepted` of them right.
  void Record(int64_t drafted, int64_t accepted);
};

}  // namespace latent::engine
