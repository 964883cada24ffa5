// One draw from a logits row at a temperature under the top-k, top-p and min-p filters, in time
// linear in the vocabulary and without sorting it: every filter keeps a prefix of one total
// order of the tokens, so the kept set is "every token up to a cut" and each filter only has to
// find its cut (a bounded heap for top-k, a histogram of probability mass for top-p, a threshold
// for min-p). The draw then walks the kept tokens in id order.
#pragma once

#include <cstdint>
#include <vector>

#include "base/order_key.h"
#include "engine/request.h"

namespace latent::engine {

// The filters' order is OrderKey(logit, id) (base/order_key.h), smaller first: the larger logit
// first, equal logits by the smaller id; -inf (a disallowed token) after every finite logit.
// Probability is monotone in the logit, so this ranks by probability, as a sort of the
// probabilities (ties by id) would, but from the logits alone: two tokens are never tied in it.
using latent::OrderKey;

// Returns the token drawn with uniform `u` in [0, 1) from softmax(logits / p.temperature)
// restricted to the kept set and renormalized:
//   * candidates: every token, or those `allowed` marks (BitmaskWords(vocab) words; null: all);
//   * top-k: the p.top_k first candidates in OrderKey's order (0: all);
//   * top-p: of those, the fewest first whose probability reaches p.top_p times their total;
//   * min-p: of those, the ones whose probability is at least p.min_p times the best one's
//     (the best always stays).
// Which token a given u picks follows id order over the kept set, so the result depends on the
// row and u only (not on the batch, the thread or how the set was found). The weights are the
// kernels' exp_weights (f32, summed in f64). p.temperature must be > 0.
int32_t DrawFiltered(const std::vector<float>& logits, const uint32_t* allowed,
                     const SamplingParams& p, double u);

// The kept set DrawFiltered draws from, as ids ascending, without the tokens of weight 0
// (disallowed, or underflowed: never drawn). Exposed for the unit test, which checks it against
// a sort of the vocabulary.
std::vector<int32_t> KeptTokens(const std::vector<float>& logits, const uint32_t* allowed,
                                const SamplingParams& p);

}  // namespace latent::engine
