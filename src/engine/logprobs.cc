#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernel_table.h"

namespace latent::engine {

float LogPartition(const float* logits, int64_t vocab) {
  constexpr int64_t kBlock = 4096;        // ids per partial sum
  thread_local std::vector<float> w;      // [vocab] exp(logit - max)
  thread_local std::vector<double> mass;  // [blocks] their sums
  w.resize(vocab);
  mass.resize((vocab + kBlock - 1) / kBlock);
  const float max_logit =
      kernels::BestKernels().exp_weights(logits, vocab, 1.0f, kBlock, w.data(), mass.data());
  double sum = 0;
  for (double m : mass) sum += m;
  return max_logit + static_cast<float>(std::log(sum));
}

void TopLogprobs(const float* logits, int64_t vocab, int32_t n, float log_z,
                 std::vector<TokenLogprob>& out) {
  out.clear();
  const int64_t keep = std::min<int64_t>(n, vocab);
  if (keep <= 0) return;
  // out holds the best so far as raw logits, best first; a later token enters only when strictly
  // larger than the worst kept, and goes after the equal ones, so ties keep ascending ids.
  out.reserve(keep);
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = logits[i];
    const bool full = static_cast<int64_t>(out.size()) == keep;
    if (full && !(v > out.back().logprob)) continue;
    if (full) out.pop_back();
    auto at = std::upper_bound(out.begin(), out.end(), v,
                               [](float value, const TokenLogprob& e) { return value > e.logprob; });
    out.insert(at, {static_cast<int32_t>(i), v});
  }
  for (TokenLogprob& e : out) e.logprob -= log_z;
}

}  // namespace latent::engine
