// DrawFiltered and TopMassCount against the sort they replace: the filters cut the ranked
// candidates (probability descending, equal ones by id) as a full sort of the vocabulary would,
// and the draw follows the kept tokens' renormalized probabilities.
#include "engine/filtered_draw.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "engine/token_constraint.h"

namespace latent::engine {
namespace {

std::vector<double> Softmax(const std::vector<float>& logits, float temperature) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> probs(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    sum += probs[i] = std::exp((logits[i] - max_logit) / temperature);
  }
  for (double& q : probs) q /= sum;
  return probs;
}

// The kept set as the sampler found it before: every candidate sorted, then the cuts in order.
std::set<int32_t> KeptBySort(const std::vector<double>& probs,
                             const std::vector<int32_t>& candidates, const SamplingParams& p) {
  std::vector<int32_t> order = candidates;
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  int64_t keep = static_cast<int64_t>(order.size());
  if (p.top_k > 0) keep = std::min<int64_t>(keep, p.top_k);
  if (p.top_p < 1.0f) {
    double mass = 0;
    for (int64_t i = 0; i < keep; ++i) mass += probs[order[i]];
    if (keep == static_cast<int64_t>(order.size())) mass = 1.0;
    double cumulative = 0;
    for (int64_t i = 0; i < keep; ++i) {
      cumulative += probs[order[i]];
      if (cumulative >= p.top_p * mass) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    int64_t i = 1;
    while (i < keep && probs[order[i]] >= p.min_p * probs[order[0]]) ++i;
    keep = i;
  }
  return std::set<int32_t>(order.begin(), order.begin() + keep);
}

// Logits with many exact ties (a few distinct values), so the id tie-break matters.
std::vector<float> TiedLogits(std::mt19937& rng, int64_t vocab, int levels) {
  std::uniform_int_distribution<int> level(0, levels - 1);
  std::vector<float> logits(vocab);
  for (float& v : logits) v = 0.5f * static_cast<float>(level(rng));
  return logits;
}

std::vector<float> SpreadLogits(std::mt19937& rng, int64_t vocab, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(vocab);
  for (float& v : logits) v = normal(rng);
  return logits;
}

TEST(TopMassCount, CutsWhereTheSortedCumulativeSumReachesTheTarget) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 3000)(rng);
    const std::vector<float> logits = trial % 2 == 0 ? TiedLogits(rng, n, 1 + trial % 7)
                                                     : SpreadLogits(rng, n, 0.2f + trial % 5);
    const std::vector<double> probs = Softmax(logits, 1.0f);
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
    // Targets just at and between the sorted prefix sums, and beyond the total.
    std::vector<double> prefix(n + 1, 0.0);
    for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + probs[order[i]];
    const int64_t at = std::uniform_int_distribution<int64_t>(1, n)(rng);
    for (double target : {prefix[at], 0.5 * (prefix[at - 1] + prefix[at]), 1e-12, 2.0}) {
      std::vector<int32_t> ids(n);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      const int64_t k = TopMassCount(ids.data(), n, probs.data(), target);
      int64_t expected = n;
      for (int64_t i = 1; i <= n; ++i) {
        if (prefix[i] >= target) {
          expected = i;
          break;
        }
      }
      // Sums taken in another order may round across a target placed exactly on a prefix sum:
      // then the cut moves by one token at most.
      ASSERT_LE(std::abs(k - expected), target == prefix[at] ? 1 : 0)
          << "n " << n << " target " << target;
      std::set<int32_t> got(ids.begin(), ids.begin() + k), best(order.begin(), order.begin() + k);
      EXPECT_EQ(got, best) << "the first k ids are not the k most likely";
      std::vector<int32_t> all = ids;
      std::sort(all.begin(), all.end());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(all[i], i) << "ids must stay a permutation";
    }
  }
}

TEST(DrawFiltered, KeepsWhatASortOfTheVocabularyKeepsAndDrawsByProbability) {
  std::mt19937 rng(11);
  const int64_t vocab = 300;
  std::vector<SamplingParams> settings;
  for (int top_k : {0, 1, 5, 200}) {
    for (float top_p : {1.0f, 0.95f, 0.5f, 0.05f}) {
      for (float min_p : {0.0f, 0.05f, 0.5f}) {
        SamplingParams p;
        p.temperature = 0.7f;
        p.top_k = top_k;
        p.top_p = top_p;
        p.min_p = min_p;
        settings.push_back(p);
      }
    }
  }
  int checked = 0;
  for (const SamplingParams& p : settings) {
    for (int row = 0; row < 3; ++row) {
      std::vector<float> logits = row == 0   ? TiedLogits(rng, vocab, 4)
                                  : row == 1 ? SpreadLogits(rng, vocab, 3.0f)
                                             : SpreadLogits(rng, vocab, 0.3f);
      // Row 2 also under a mask: a third of the tokens allowed (the others are -inf, as
      // MaskDisallowed leaves them).
      std::vector<uint32_t> mask(BitmaskWords(vocab), 0);
      std::vector<int32_t> candidates;
      for (int32_t t = 0; t < vocab; ++t) {
        if (row != 2 || t % 3 == 1) {
          mask[t / 32] |= 1u << (t % 32);
          candidates.push_back(t);
        } else {
          logits[t] = -std::numeric_limits<float>::infinity();
        }
      }
      const std::vector<double> probs = Softmax(logits, p.temperature);
      const std::set<int32_t> kept = KeptBySort(probs, candidates, p);
      double kept_mass = 0;
      for (int32_t t : kept) kept_mass += probs[t];
      // u on a fine grid: each kept token is drawn for its share of [0, 1), the others never.
      constexpr int kDraws = 4000;
      std::vector<int> count(vocab, 0);
      for (int i = 0; i < kDraws; ++i) {
        ++count[DrawFiltered(logits, row == 2 ? mask.data() : nullptr, p, (i + 0.5) / kDraws)];
      }
      for (int32_t t = 0; t < vocab; ++t) {
        if (!kept.count(t)) {
          ASSERT_EQ(count[t], 0) << "token " << t << " is outside the kept set";
          continue;
        }
        EXPECT_NEAR(count[t] / static_cast<double>(kDraws), probs[t] / kept_mass, 1.5 / kDraws)
            << "token " << t << " top_k " << p.top_k << " top_p " << p.top_p << " min_p "
            << p.min_p;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(settings.size()) * 3);
}

}  // namespace
}  // namespace latent::engine
