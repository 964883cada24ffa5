// Log-probabilities from a row of raw logits: shared by sampled tokens (SampleNext) and prompt
// tokens (prompt logprobs for scoring), so both report the same numbers.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/request.h"

namespace latent::engine {

// log(sum(exp(logits))) over `logits` [vocab]: the kernels' exp_weights around the max (f32
// terms, f64 sums in a fixed order: the same row gives the same value on any thread).
float LogPartition(const float* logits, int64_t vocab);

// The `n` largest logits of `logits` [vocab] as logprobs (logit - log_z), best first; equal logits
// in ascending token order. One pass with an insertion list of n: n is small (<= 20).
void TopLogprobs(const float* logits, int64_t vocab, int32_t n, float log_z,
                 std::vector<TokenLogprob>& out);

}  // namespace latent::engine
