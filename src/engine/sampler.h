// Picks the next token of one sequence from its logits row.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/request.h"
#include "engine/sequence.h"

namespace latent::engine {

struct SampledToken {
  int32_t token = -1;
  // log p(token) under the model's raw distribution (no penalties or temperature), renormalised
  // over the allowed tokens under a grammar.
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
};

// True when x[n] holds a NaN or +inf (-inf, a masked token's logit, is fine). Vectorized.
bool HasNanOrPosInf(const float* x, int64_t n);

// The error of a sample whose logits are NaN or +inf (the model overflowed).
inline constexpr const char* kNonFiniteLogitsError =
    "the model produced non-finite logits (NaN/inf): no token or logprob can be computed from "
    "them (an overflow in the model's weights or activations)";

// `logits` [vocab] is the model's output for the sequence's last token. The draw uses a
// generator seeded from (seq.seed, tokens generated so far) only, so a seeded request gives the
// same tokens alone, in any batch, and after preemption.
// `allowed` [BitmaskWords(vocab)] (structured output; null: every token): tokens whose bit is
// clear get probability 0 before penalties, temperature and the filters. The logprobs reported
// are those of the raw row with the same tokens masked (vLLM's: renormalised over the allowed
// ones; nothing else that shapes the draw enters them). Without `allowed` the result is exactly
// what it was without the parameter. Throws latent::Error when the mask allows no token.
// `held_off` (min_tokens: the EOS and stop ids while too few tokens are generated; ids outside
// the vocabulary are skipped) get probability 0 too, unless nothing else is allowed: then the
// grammar wins and they stay drawable (a row of -inf has nothing to draw).
// `params.allowed_token_ids` narrows the draw's mask as `allowed` does, and `params.logit_bias`
// is added after the masks, before the penalties (vLLM's order); neither enters the logprobs.
// Both are read from `tables` (BuildSamplingTables of `params`; null: built here, per call).
// Throws latent::Error too when the row to draw from (after the masks and penalties), or the row
// logprobs are computed from, holds a NaN or +inf: no draw from it means anything.
SampledToken SampleNext(const float* logits, int64_t vocab, const Sequence& seq,
                        const SamplingParams& params, const uint32_t* allowed = nullptr,
                        std::span<const int32_t> held_off = {},
                        const SamplingTables* tables = nullptr);

// `params`' logit_bias and allowed_token_ids as SampleNext reads them; ids outside the vocabulary
// are skipped. `also_allowed` joins allowed_token_ids when it is set (the grammar's end, which
// Engine::Submit lets through under a grammar).
SamplingTables BuildSamplingTables(const SamplingParams& params, int64_t vocab,
                                   std::span<const int32_t> also_allowed = {});

}  // namespace latent::engine
