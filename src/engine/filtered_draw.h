// One draw from a logits row at a temperature under the top-k, top-p and min-p filters, in time
// linear in the vocabulary: the kept set is found by selection (no sort of the vocabulary) and the
// draw walks it in id order.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/request.h"

namespace latent::engine {

// Tokens ranked by probability, the larger first, equal ones by id: the order the filters cut.
// Returns the token drawn with uniform `u` in [0, 1) from softmax(logits / p.temperature)
// restricted to the kept set and renormalized:
//   * candidates: every token, or those `allowed` marks (BitmaskWords(vocab) words; null: all);
//   * top-k: the p.top_k best candidates (0: all);
//   * top-p: of those, the fewest best whose probability reaches p.top_p times their total;
//   * min-p: of those, the ones at least p.min_p times the best one's probability (the best
//     always stays).
// Which token a given u picks follows id order over the kept set, so the result depends on the
// row and u only (not on how the set was found). p.temperature must be > 0.
int32_t DrawFiltered(const std::vector<float>& logits, const uint32_t* allowed,
                     const SamplingParams& p, double u);

// Rearranges ids[0, n) (distinct tokens) so that ids[0, k) is the smallest set of the best of
// them, in the order above, whose `probs` (probabilities, or weights proportional to them) sum to
// at least `target`, and returns k (n when all of them fall short). Linear time: one pass puts
// the mass in probability buckets, a quickselect ranks the one bucket the cut falls in.
// Exposed for the unit test, which checks it against a sort.
int64_t TopMassCount(int32_t* ids, int64_t n, const double* probs, double target);

}  // namespace latent::engine
