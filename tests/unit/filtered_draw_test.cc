// DrawFiltered against the sort it replaces: the filters cut the ranked candidates (logit
// descending, equal ones by id) as a full sort of the vocabulary would, over the same weights,
// and the draw follows the kept tokens' renormalized probabilities.
#include "engine/filtered_draw.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "kernels/kernel_table.h"
#include "threads/thread_pool.h"

namespace latent::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The weights DrawFiltered draws with: the kernels' exp_weights at the temperature.
std::vector<float> Weights(const std::vector<float>& logits, float temperature) {
  const int64_t n = static_cast<int64_t>(logits.size());
  std::vector<float> w(n);
  std::vector<double> block_mass((n + 15) / 16);
  kernels::BestKernels().exp_weights(logits.data(), n, 1.0f / temperature, 16, w.data(),
                                     block_mass.data());
  return w;
}

// The kept set by a sort of every candidate (logit descending, then id), then the cuts in
// order, as the filters are specified; without the tokens of weight 0.
std::vector<int32_t> KeptBySort(const std::vector<float>& logits, const std::vector<float>& w,
                                const std::vector<int32_t>& candidates, const SamplingParams& p) {
  std::vector<int32_t> order = candidates;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  int64_t keep = static_cast<int64_t>(order.size());
  if (p.top_k > 0) keep = std::min<int64_t>(keep, p.top_k);
  if (p.top_p < 1.0f) {
    double mass = 0;
    for (int64_t i = 0; i < keep; ++i) mass += w[order[i]];
    double cumulative = 0;
    for (int64_t i = 0; i < keep; ++i) {
      cumulative += w[order[i]];
      if (cumulative >= p.top_p * mass) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    int64_t i = 1;
    while (i < keep && w[order[i]] >= p.min_p * w[order[0]]) ++i;
    keep = i;
  }
  std::vector<int32_t> kept(order.begin(), order.begin() + keep);
  // Tokens whose weight underflowed to 0 are never drawn: not reported as kept.
  std::erase_if(kept, [&](int32_t t) { return w[t] == 0.0f; });
  std::sort(kept.begin(), kept.end());
  return kept;
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

// One row of a case: its logits (disallowed tokens at -inf, as MaskDisallowed leaves them), its
// mask (empty: every token allowed) and its candidates.
struct CaseRow {
  std::vector<float> logits;
  std::vector<uint32_t> mask;
  std::vector<int32_t> candidates;
  std::string name;
};

// Rows of `vocab` tokens: tied logits, spread ones, nearly flat ones (a randomly initialized
// model's: top-p then keeps most of the vocabulary), peaked ones (a trained model's: a few dozen
// tokens hold nearly all the mass) and spread ones under a mask that allows a third of the
// tokens.
std::vector<CaseRow> CaseRows(std::mt19937& rng, int64_t vocab) {
  std::vector<CaseRow> rows = {{TiedLogits(rng, vocab, 4), {}, {}, "tied"},
                               {SpreadLogits(rng, vocab, 3.0f), {}, {}, "spread"},
                               {SpreadLogits(rng, vocab, 0.05f), {}, {}, "flat"},
                               {SpreadLogits(rng, vocab, 8.0f), {}, {}, "peaked"},
                               {SpreadLogits(rng, vocab, 0.3f), {}, {}, "masked"}};
  for (CaseRow& row : rows) {
    const bool masked = row.name == "masked";
    if (masked) row.mask.assign(BitmaskWords(vocab), 0);
    for (int32_t t = 0; t < vocab; ++t) {
      if (!masked || t % 3 == 1) {
        if (masked) row.mask[t / 32] |= 1u << (t % 32);
        row.candidates.push_back(t);
      } else {
        row.logits[t] = -kInf;
      }
    }
  }
  return rows;
}

std::vector<SamplingParams> Settings(std::vector<int> top_ks) {
  std::vector<SamplingParams> settings;
  for (int top_k : top_ks) {
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
  return settings;
}

std::string Describe(const CaseRow& row, const SamplingParams& p) {
  return row.name + " vocab " + std::to_string(row.logits.size()) + " top_k " +
         std::to_string(p.top_k) + " top_p " + std::to_string(p.top_p) + " min_p " +
         std::to_string(p.min_p);
}

TEST(OrderKey, RanksTheLargerLogitFirstThenTheSmallerId) {
  const std::vector<float> ascending = {-kInf, -1e30f, -2.0f, -1e-30f, 0.0f, 1e-30f, 3.0f, 1e30f};
  for (size_t i = 0; i + 1 < ascending.size(); ++i) {
    EXPECT_LT(OrderKey(ascending[i + 1], 5), OrderKey(ascending[i], 1))
        << ascending[i + 1] << " ranks before " << ascending[i] << " whatever the ids";
  }
  EXPECT_LT(OrderKey(1.5f, 3), OrderKey(1.5f, 4));
  EXPECT_LT(OrderKey(-0.0f, 3), OrderKey(0.0f, 4)) << "-0 and +0 are one logit";
  EXPECT_LT(OrderKey(0.0f, 3), OrderKey(-0.0f, 4));
}

// Every path: top-k by a bounded heap (k <= 4096) and by selection (5000); top-p over a small
// vocabulary, over the tokens near the best (peaked rows), listed from its histogram and cut
// through a 20,000-token vocabulary (flat rows); min-p over each.
TEST(KeptTokens, EqualTheKeptSetOfASortOfTheVocabulary) {
  std::mt19937 rng(11);
  int checked = 0;
  for (int64_t vocab : {300, 20000}) {
    for (const CaseRow& row : CaseRows(rng, vocab)) {
      for (const SamplingParams& p : Settings({0, 1, 5, 200, 5000})) {
        const std::vector<float> w = Weights(row.logits, p.temperature);
        const uint32_t* mask = row.mask.empty() ? nullptr : row.mask.data();
        ASSERT_EQ(KeptTokens(row.logits, mask, p), KeptBySort(row.logits, w, row.candidates, p))
            << Describe(row, p);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 2 * 5 * 5 * 4 * 3);
}

TEST(DrawFiltered, DrawsTheKeptTokensByProbability) {
  std::mt19937 rng(12);
  for (int64_t vocab : {300, 20000}) {
    // The large vocabulary with fewer draws: every kept token is still checked to within one
    // step of the grid of u.
    const int draws = vocab > 1000 ? 1000 : 2000;
    for (const CaseRow& row : CaseRows(rng, vocab)) {
      if (vocab > 1000 && row.name != "flat" && row.name != "peaked") continue;
      for (const SamplingParams& p : Settings(vocab > 1000 ? std::vector<int>{0}
                                                           : std::vector<int>{0, 5, 200})) {
        const std::vector<float> w = Weights(row.logits, p.temperature);
        const std::vector<int32_t> kept = KeptBySort(row.logits, w, row.candidates, p);
        double kept_mass = 0;
        for (int32_t t : kept) kept_mass += w[t];
        // u on a fine grid: each kept token is drawn for its share of [0, 1) (within one grid
        // step), the others never.
        std::vector<int> count(vocab, 0);
        const uint32_t* mask = row.mask.empty() ? nullptr : row.mask.data();
        for (int i = 0; i < draws; ++i) {
          ++count[DrawFiltered(row.logits, mask, p, (i + 0.5) / draws)];
        }
        const std::set<int32_t> in(kept.begin(), kept.end());
        for (int32_t t = 0; t < vocab; ++t) {
          if (!in.count(t)) {
            ASSERT_EQ(count[t], 0) << "token " << t << " is outside the kept set; "
                                   << Describe(row, p);
            continue;
          }
          ASSERT_NEAR(count[t] / static_cast<double>(draws), w[t] / kept_mass, 1.5 / draws)
              << "token " << t << "; " << Describe(row, p);
        }
      }
    }
  }
}

TEST(DrawFiltered, UAtTheEndsDrawsTheFirstAndLastKeptTokens) {
  std::mt19937 rng(13);
  std::vector<float> logits = SpreadLogits(rng, 5000, 1.0f);
  for (const SamplingParams& p : Settings({0, 50})) {
    const std::vector<float> w = Weights(logits, p.temperature);
    std::vector<int32_t> all(logits.size());
    for (size_t t = 0; t < all.size(); ++t) all[t] = static_cast<int32_t>(t);
    const std::vector<int32_t> kept = KeptBySort(logits, w, all, p);
    EXPECT_EQ(DrawFiltered(logits, nullptr, p, 0.0), kept.front());
    EXPECT_EQ(DrawFiltered(logits, nullptr, p, std::nextafter(1.0, 0.0)), kept.back());
  }
}

TEST(DrawFiltered, ATinyTemperatureDrawsTheBestTokens) {
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.999f};
  for (float temperature : {1e-6f, 1e-30f, 1e-40f}) {
    SamplingParams p;
    p.temperature = temperature;
    for (double u : {0.0, 0.3, 0.7, 0.99}) {
      const int32_t token = DrawFiltered(logits, nullptr, p, u);
      EXPECT_TRUE(token == 1 || token == 3) << "temperature " << temperature << " u " << u;
    }
    EXPECT_EQ(DrawFiltered(logits, nullptr, p, 0.2), 1) << "the tied best split u evenly";
    EXPECT_EQ(DrawFiltered(logits, nullptr, p, 0.7), 3);
  }
}

// A row whose max is -0 beside +0 logits: the tied best tokens still rank first (the histogram
// path binned them last once, by the sign of their distance -0).
TEST(KeptTokens, ZerosOfEitherSignTieForTheBest) {
  std::vector<float> logits(8192, -5.0f);
  logits[0] = 0.0f;
  logits[16] = -0.0f;
  std::vector<int32_t> all(logits.size());
  for (size_t t = 0; t < all.size(); ++t) all[t] = static_cast<int32_t>(t);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;
  const std::vector<float> w = Weights(logits, p.temperature);
  const std::vector<int32_t> kept = KeptTokens(logits, nullptr, p);
  EXPECT_EQ(kept, KeptBySort(logits, w, all, p));
  EXPECT_TRUE(std::binary_search(kept.begin(), kept.end(), 0));
  EXPECT_TRUE(std::binary_search(kept.begin(), kept.end(), 16));
}

// Every token disallowed (a caller's mask that SampleNext would have refused): a token id, the
// same on every call, whatever the thread drew before.
TEST(DrawFiltered, ARowWithNothingAllowedGivesAnIdInRange) {
  std::mt19937 rng(14);
  const std::vector<float> none(5000, -kInf);
  // Another row first, whose kept tokens all have ids past 5000.
  std::vector<float> other = SpreadLogits(rng, 20000, 1.0f);
  for (size_t t = 0; t < 10000; ++t) other[t] = -30.0f;
  for (const SamplingParams& p : Settings({0, 50})) {
    DrawFiltered(other, nullptr, p, 0.5);  // leaves this thread's buffers full
    const int32_t token = DrawFiltered(none, nullptr, p, 0.5);
    EXPECT_GE(token, 0);
    EXPECT_LT(token, 5000);
    EXPECT_EQ(DrawFiltered(none, nullptr, p, 0.5), token);
    EXPECT_TRUE(KeptTokens(none, nullptr, p).empty());
  }
}

// A temperature whose inverse is subnormal, so 0 where denormals are flushed (as on the pool's
// threads, where the engine draws), with logits whose gaps overflow: the distances stay inf
// (weight 0), not inf * 0 = NaN.
TEST(DrawFiltered, AHugeTemperatureKeepsWeightsFinite) {
  const std::vector<float> logits = {3e38f, -3e38f, 0.0f};
  SamplingParams p;
  p.temperature = 1e38f;
  p.top_p = 0.5f;
  std::vector<int32_t> kept;
  std::vector<int32_t> drawn;
  threads::ParallelFor(1, 1, [&](int64_t, int64_t) {  // on a thread with FTZ/DAZ set
    kept = KeptTokens(logits, nullptr, p);
    for (double u : {0.0, 0.5, 0.99}) drawn.push_back(DrawFiltered(logits, nullptr, p, u));
  });
  EXPECT_EQ(kept, std::vector<int32_t>{0});
  EXPECT_EQ(drawn, (std::vector<int32_t>{0, 0, 0}));
}

}  // namespace
}  // namespace latent::engine
