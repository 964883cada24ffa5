// Picks the next token of one sequence from its logits row.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/request.h"
#include "engine/sequence.h"

namespace latent::engine {

struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;  // log p(token) under the model's raw distribution (no penalties).
  std::vector<TokenLogprob> top_logprobs;
};

// `logits` [vocab] is the model's output for the sequence's last token. The draw uses a
// generator seeded from (seq.seed, tokens generated so far) only, so a seeded request gives the
// same tokens alone, in any batch, and after preemption.
// `allowed` [BitmaskWords(vocab)] (structured output; null: every token): tokens whose bit is
// clear get probability 0 before penalties, temperature and the filters. The logprobs reported
// stay those of the raw row. Without `allowed` the result is exactly what it was without the
// parameter. Throws latent::Error when the mask allows no token.
SampledToken SampleNext(const float* logits, int64_t vocab, const Sequence& seq,
                        const SamplingParams& params, const uint32_t* allowed = nullptr);

}  // namespace latent::engine
