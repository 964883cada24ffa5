#include "engine/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/sampling_params.h"
#include "engine/sequence.h"

namespace latent::engine {
namespace {

using ::testing::HasSubstr;

Sequence MakeSequence(std::vector<int32_t> prompt, std::vector<int32_t> generated = {},
                      uint64_t seed = 0) {
  Sequence seq(0, 16);
  seq.num_prompt = static_cast<int64_t>(prompt.size());
  seq.tokens = std::move(prompt);
  seq.tokens.insert(seq.tokens.end(), generated.begin(), generated.end());
  seq.seed = seed;
  return seq;
}

int32_t Sample(const std::vector<float>& logits, const Sequence& seq, const SamplingParams& p) {
  return SampleNext(logits.data(), static_cast<int64_t>(logits.size()), seq, p).token;
}

SamplingParams Greedy() { return SamplingParams{}; }

std::vector<double> Softmax(const std::vector<float>& logits, double temperature = 1.0) {
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    sum += p[i] = std::exp((logits[i] - max) / temperature);
  for (double& q : p) q /= sum;
  return p;
}

// Logits whose softmax at temperature 1 is `probs`.
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Frequency of each token over `draws` sequences with seeds 0, 1, ..., all at the same step.
std::vector<double> Frequencies(const std::vector<float>& logits, const SamplingParams& p,
                                int draws = 20000) {
  std::vector<double> freq(logits.size(), 0.0);
  Sequence seq = MakeSequence({0});
  for (int s = 0; s < draws; ++s) {
    seq.seed = static_cast<uint64_t>(s);
    ++freq[Sample(logits, seq, p)];
  }
  for (double& f : freq) f /= draws;
  return freq;
}

// `probs` restricted to `kept` and renormalized.
std::vector<double> Restrict(const std::vector<double>& probs, const std::set<int32_t>& kept) {
  std::vector<double> out(probs.size(), 0.0);
  double sum = 0;
  for (int32_t t : kept) sum += probs[t];
  for (int32_t t : kept) out[t] = probs[t] / sum;
  return out;
}

// Tokens outside the expected support never appear; the others match within `tolerance`
// (20,000 draws: the standard error is at most 0.0035).
void ExpectDistribution(const std::vector<double>& freq, const std::vector<double>& expected,
                        double tolerance = 0.015) {
  ASSERT_EQ(freq.size(), expected.size());
  for (size_t t = 0; t < freq.size(); ++t) {
    if (expected[t] == 0.0) {
      EXPECT_EQ(freq[t], 0.0) << "token " << t << " should be excluded";
    } else {
      EXPECT_NEAR(freq[t], expected[t], tolerance) << "token " << t;
    }
  }
}

// Distinct probabilities; by rank: token 1 (.40), 3 (.25), 4 (.15), 2 (.10), 5 (.06), 0 (.04).
const std::vector<double> kProbs = {0.04, 0.40, 0.10, 0.25, 0.15, 0.06};

TEST(SamplerTest, GreedyIsArgmax) {
  const Sequence seq = MakeSequence({0});
  EXPECT_EQ(Sample({0.1f, 2.5f, -1.0f, 2.4f}, seq, Greedy()), 1);
  EXPECT_EQ(Sample({-5.0f, -3.0f, -4.0f}, seq, Greedy()), 1);
  EXPECT_EQ(Sample({1.0f, 1.0f, 0.0f}, seq, Greedy()), 0);  // Ties: the lowest id.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<float> logits(50);
    for (float& l : logits) l = normal(rng);
    const int32_t argmax =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    Sequence s = MakeSequence({1, 2, 3}, {}, static_cast<uint64_t>(trial));
    EXPECT_EQ(Sample(logits, s, Greedy()), argmax);
  }
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveLogitsOfSeenTokens) {
  const std::vector<float> logits = {3.0f, 2.0f, 0.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;  // 3 / 2 = 1.5 < 2: flips to token 1.
  EXPECT_EQ(Sample(logits, MakeSequence({0}), p), 1);
  p.repetition_penalty = 1.4f;  // 3 / 1.4 = 2.14 > 2: stays.
  EXPECT_EQ(Sample(logits, MakeSequence({0}), p), 0);
  // Once per token however often it was seen: 3 / 1.4^3 = 1.09 would flip.
  EXPECT_EQ(Sample(logits, MakeSequence({0, 0, 0}, {0, 0}), p), 0);
  // Generated tokens count too.
  p.repetition_penalty = 2.0f;
  EXPECT_EQ(Sample(logits, MakeSequence({2}, {0}), p), 1);
  // Unseen tokens are untouched.
  EXPECT_EQ(Sample(logits, MakeSequence({2}), p), 0);
  // A penalty below 1 rewards seen tokens: 2 / 0.5 = 4 > 3.
  p.repetition_penalty = 0.5f;
  EXPECT_EQ(Sample(logits, MakeSequence({1}), p), 1);
}

TEST(SamplerTest, RepetitionPenaltyMultipliesNegativeLogitsOfSeenTokens) {
  const std::vector<float> logits = {-1.0f, -1.5f, -4.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;  // -1 * 2 = -2 < -1.5: flips (dividing would give -0.5).
  EXPECT_EQ(Sample(logits, MakeSequence({0}), p), 1);
  p.repetition_penalty = 1.4f;  // -1.4 > -1.5: stays.
  EXPECT_EQ(Sample(logits, MakeSequence({0}), p), 0);
  EXPECT_EQ(Sample(logits, MakeSequence({0, 0}, {0}), p), 0);  // Once, not -1 * 1.4^3.
}

TEST(SamplerTest, PresencePenaltyAppliesOnceToGeneratedTokensOnly) {
  const std::vector<float> logits = {3.0f, 2.0f, 0.0f};
  SamplingParams p;
  p.presence_penalty = 1.1f;  // 3 - 1.1 = 1.9 < 2.
  EXPECT_EQ(Sample(logits, MakeSequence({5}, {0}), p), 1);
  EXPECT_EQ(Sample(logits, MakeSequence({0, 0, 0}), p), 0);  // Prompt tokens: no penalty.
  p.presence_penalty = 0.9f;  // Once however often: 3 - 0.9 = 2.1 > 2.
  EXPECT_EQ(Sample(logits, MakeSequence({5}, {0, 0, 0}), p), 0);
  p.presence_penalty = -2.0f;  // Negative: a bonus.
  EXPECT_EQ(Sample({2.0f, 3.0f}, MakeSequence({5}, {0}), p), 0);
}

TEST(SamplerTest, FrequencyPenaltyScalesWithTheGeneratedCount) {
  const std::vector<float> logits = {3.0f, 2.0f, 0.0f};
  SamplingParams p;
  p.frequency_penalty = 0.4f;  // Twice: 3 - 0.8 = 2.2 > 2.
  EXPECT_EQ(Sample(logits, MakeSequence({5}, {0, 0}), p), 0);
  p.frequency_penalty = 0.6f;  // Twice: 3 - 1.2 = 1.8 < 2; once: 2.4 > 2.
  EXPECT_EQ(Sample(logits, MakeSequence({5}, {0, 0}), p), 1);
  EXPECT_EQ(Sample(logits, MakeSequence({5}, {0, 2}), p), 0);
  EXPECT_EQ(Sample(logits, MakeSequence({0, 0, 0, 0}, {2}), p), 0);  // Prompt does not count.
  // Together: presence + frequency * count. 0.5 + 0.3 * 2 = 1.1 flips; 0.5 + 0.2 * 2 does not.
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.3f;
  EXPECT_EQ(Sample(logits, MakeSequence({5}, {0, 0}), p), 1);
  p.frequency_penalty = 0.2f;
  EXPECT_EQ(Sample(logits, MakeSequence({5}, {0, 0}), p), 0);
}

TEST(SamplerTest, PenaltiesApplyWhenSamplingToo) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  p.repetition_penalty = 2.0f;
  EXPECT_EQ(Sample({3.0f, 2.0f, 0.0f}, MakeSequence({0}, {}, 9), p), 1);
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = 0.6f;
  EXPECT_EQ(Sample({3.0f, 2.0f, 0.0f}, MakeSequence({5}, {0, 0}, 9), p), 1);
}

TEST(SamplerTest, TopKOneIsGreedyAtAnyTemperature) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float temperature : {0.01f, 0.5f, 1.0f, 10.0f, 1000.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = 1;
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> logits(32);
      for (float& l : logits) l = normal(rng);
      Sequence seq = MakeSequence({1}, {}, static_cast<uint64_t>(trial) * 7919);
      EXPECT_EQ(Sample(logits, seq, p), Sample(logits, seq, Greedy()))
          << "temperature " << temperature;
    }
  }
}

TEST(SamplerTest, SameSeedAndStepGiveTheSameToken) {
  const std::vector<float> logits(64, 0.0f);  // Uniform: every draw matters.
  SamplingParams p;
  p.temperature = 1.0f;
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xffffffffffffffffull}) {
    for (int generated = 0; generated < 5; ++generated) {
      // Different prompts, same number of generated tokens: same draw.
      Sequence a = MakeSequence({1, 2, 3}, std::vector<int32_t>(generated, 7), seed);
      Sequence b = MakeSequence({9}, std::vector<int32_t>(generated, 8), seed);
      const int32_t token = Sample(logits, a, p);
      EXPECT_EQ(Sample(logits, a, p), token);
      EXPECT_EQ(Sample(logits, b, p), token);
    }
  }
}

TEST(SamplerTest, DifferentSeedsAndStepsGiveDifferentTokens) {
  const std::vector<float> logits(64, 0.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  // Many seeds at one step.
  std::set<int32_t> across_seeds;
  int same_as_next = 0;
  for (uint64_t seed = 0; seed < 500; ++seed) {
    const int32_t t = Sample(logits, MakeSequence({1}, {}, seed), p);
    across_seeds.insert(t);
    same_as_next += t == Sample(logits, MakeSequence({1}, {}, seed + 1), p);
  }
  EXPECT_GT(across_seeds.size(), 55u);  // 500 draws over 64 tokens cover almost all.
  EXPECT_LT(same_as_next, 30);          // About 500 / 64 expected.
  // One seed across steps.
  Sequence seq = MakeSequence({1}, {}, 12345);
  std::set<int32_t> across_steps;
  for (int step = 0; step < 500; ++step) {
    const int32_t t = Sample(logits, seq, p);
    across_steps.insert(t);
    seq.tokens.push_back(t);
  }
  EXPECT_GT(across_steps.size(), 55u);
}

TEST(SamplerTest, EmpiricalDistributionMatchesSoftmaxAtTemperature) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f};
  for (float temperature : {0.7f, 1.0f, 2.5f}) {
    SamplingParams p;
    p.temperature = temperature;
    SCOPED_TRACE(temperature);
    ExpectDistribution(Frequencies(logits, p), Softmax(logits, temperature));
  }
}

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 3;
  ExpectDistribution(Frequencies(LogitsOf(kProbs), p), Restrict(kProbs, {1, 3, 4}));
  p.top_k = 100;  // More than the vocabulary: off.
  ExpectDistribution(Frequencies(LogitsOf(kProbs), p), kProbs);
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.6f;  // .40, .65: two tokens.
  ExpectDistribution(Frequencies(LogitsOf(kProbs), p), Restrict(kProbs, {1, 3}));
  p.top_p = 0.75f;  // .40, .65, .80: three.
  ExpectDistribution(Frequencies(LogitsOf(kProbs), p), Restrict(kProbs, {1, 3, 4}));
  p.top_p = 0.3f;  // The best token alone already has .40.
  ExpectDistribution(Frequencies(LogitsOf(kProbs), p), Restrict(kProbs, {1}));
}

TEST(SamplerTest, MinPKeepsTokensAboveAFractionOfTheBest) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.3f;  // Floor .12: .10 and below go.
  ExpectDistribution(Frequencies(LogitsOf(kProbs), p), Restrict(kProbs, {1, 3, 4}));
  p.min_p = 0.5f;  // Floor .20.
  ExpectDistribution(Frequencies(LogitsOf(kProbs), p), Restrict(kProbs, {1, 3}));
  // On the tempered distribution: at T = 0.5 probabilities go as p^2, so the floor 0.1 * .16
  // keeps .0625 and .0225 but not .01.
  p.temperature = 0.5f;
  p.min_p = 0.1f;
  const std::vector<double> tempered = Softmax(LogitsOf(kProbs), 0.5);
  ExpectDistribution(Frequencies(LogitsOf(kProbs), p), Restrict(tempered, {1, 3, 4}));
}

TEST(SamplerTest, TopPAppliesToTheTopKDistribution) {
  // In order: top-k keeps {1, 3, 4} renormalized to .5, .3125, .1875; top-p 0.7 then keeps
  // {1, 3} (cumulative .8125). Measured on the unrenormalized probabilities the cumulative
  // would reach only .65 after two tokens and keep token 4 too.
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 3;
  p.top_p = 0.7f;
  ExpectDistribution(Frequencies(LogitsOf(kProbs), p), Restrict(kProbs, {1, 3}));
  // And min-p after both: relative to the best token, so renormalizing changes nothing.
  p.top_p = 0.95f;
  p.min_p = 0.5f;
  ExpectDistribution(Frequencies(LogitsOf(kProbs), p), Restrict(kProbs, {1, 3}));
}

TEST(SamplerTest, LogprobsAreOfTheRawDistribution) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, -1.0f, 0.5f};
  const std::vector<double> probs = Softmax(logits);
  SamplingParams p;
  p.repetition_penalty = 3.0f;  // Token 1 is seen: 3 / 3 = 1 < 2, so greedy takes token 2.
  p.top_logprobs = 3;
  const Sequence seq = MakeSequence({1});
  SampledToken out = SampleNext(logits.data(), 5, seq, p);
  EXPECT_EQ(out.token, 2);
  EXPECT_NEAR(out.logprob, std::log(probs[2]), 1e-5);
  ASSERT_EQ(out.top_logprobs.size(), 3u);
  const std::vector<int32_t> expected_order = {1, 2, 0};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out.top_logprobs[i].token, expected_order[i]);
    EXPECT_NEAR(std::exp(out.top_logprobs[i].logprob), probs[expected_order[i]], 1e-6);
    if (i > 0) {
      EXPECT_GE(out.top_logprobs[i - 1].logprob, out.top_logprobs[i].logprob);
    }
  }

  // The sampled token's own logprob ignores its penalty too: 3 / 1.2 = 2.5 keeps token 1 first.
  p.repetition_penalty = 1.2f;
  out = SampleNext(logits.data(), 5, seq, p);
  EXPECT_EQ(out.token, 1);
  EXPECT_NEAR(out.logprob, std::log(probs[1]), 1e-5);
  EXPECT_NEAR(out.top_logprobs[0].logprob, std::log(probs[1]), 1e-5);

  // Temperature and filters change the draw, never the reported probabilities.
  p.temperature = 0.3f;
  p.top_k = 2;
  p.top_logprobs = 20;  // More than the vocabulary: all of it.
  for (uint64_t s = 0; s < 50; ++s) {
    const Sequence seeded = MakeSequence({1}, {}, s);
    out = SampleNext(logits.data(), 5, seeded, p);
    EXPECT_NEAR(out.logprob, std::log(probs[out.token]), 1e-5);
    ASSERT_EQ(out.top_logprobs.size(), 5u);
    double total = 0;
    for (size_t i = 0; i < 5; ++i) {
      total += std::exp(out.top_logprobs[i].logprob);
      EXPECT_NEAR(std::exp(out.top_logprobs[i].logprob), probs[out.top_logprobs[i].token], 1e-6);
      if (i > 0) {
        EXPECT_GE(out.top_logprobs[i - 1].logprob, out.top_logprobs[i].logprob);
      }
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
}

TEST(SamplerTest, LogprobsOnlyWhenAskedFor) {
  const std::vector<float> logits = {0.0f, 1.0f};
  SamplingParams p;
  SampledToken out = SampleNext(logits.data(), 2, MakeSequence({0}), p);
  EXPECT_EQ(out.token, 1);
  EXPECT_EQ(out.logprob, 0.0f);
  EXPECT_TRUE(out.top_logprobs.empty());
  p.top_logprobs = 0;  // The sampled token's only.
  out = SampleNext(logits.data(), 2, MakeSequence({0}), p);
  EXPECT_NEAR(out.logprob, std::log(Softmax(logits)[1]), 1e-6);
  EXPECT_TRUE(out.top_logprobs.empty());
}

TEST(SamplerTest, LogprobsStayFiniteForLargeLogits) {
  const std::vector<float> logits = {1000.0f, 999.0f, -1000.0f};
  SamplingParams p;
  p.top_logprobs = 3;
  SampledToken out = SampleNext(logits.data(), 3, MakeSequence({0}), p);
  EXPECT_NEAR(out.logprob, -std::log1p(std::exp(-1.0)), 1e-4);
  EXPECT_TRUE(std::isfinite(out.top_logprobs[1].logprob));
}

// min_tokens' held-off ids never come out, in every path (greedy on the raw row, greedy with
// penalties, sampled, structured), while the other tokens keep their odds.
TEST(SamplerTest, HeldOffTokensAreNeverDrawn) {
  const std::vector<float> logits = {0.0f, 5.0f, 4.0f, 1.0f, 4.5f};
  const std::vector<int32_t> held = {1, 4, 99, -1};  // ids outside the vocabulary are skipped
  const Sequence seq = MakeSequence({0});
  auto sample = [&](const SamplingParams& p, const uint32_t* allowed = nullptr,
                    const Sequence& s = MakeSequence({0})) {
    return SampleNext(logits.data(), 5, s, p, allowed, held).token;
  };
  EXPECT_EQ(sample(Greedy()), 2);
  SamplingParams penalized;
  penalized.presence_penalty = 0.5f;
  EXPECT_EQ(sample(penalized), 2);
  // A best token that is not held off: the raw row's answer.
  EXPECT_EQ(SampleNext(logits.data(), 5, seq, Greedy(), nullptr, std::vector<int32_t>{4}).token, 1);
  SamplingParams hot;
  hot.temperature = 2.0f;
  for (uint64_t s = 0; s < 500; ++s) {
    const int32_t t = sample(hot, nullptr, MakeSequence({0}, {}, s));
    EXPECT_NE(t, 1);
    EXPECT_NE(t, 4);
  }
  const uint32_t allowed = 0b10011;  // 0, 1, 4
  EXPECT_EQ(sample(Greedy(), &allowed), 0);
}

TEST(SamplerTest, HeldOffTokensYieldToAGrammarThatAllowsNothingElse) {
  const std::vector<float> logits = {3.0f, 1.0f, 2.0f};
  const uint32_t only_eos = 0b010;
  const std::vector<int32_t> held = {1};
  SamplingParams hot;
  hot.temperature = 1.0f;
  for (const SamplingParams& p : {Greedy(), hot}) {
    EXPECT_EQ(SampleNext(logits.data(), 3, MakeSequence({0}), p, &only_eos, held).token, 1);
  }
  // Without a grammar, a vocabulary of only held-off ids: the same.
  EXPECT_EQ(SampleNext(logits.data(), 3, MakeSequence({0}), Greedy(), nullptr,
                       std::vector<int32_t>{0, 1, 2, 2})
                .token,
            0);
}

// NaN or +inf in the row: a clear error in every path, not a token (a NaN never was the argmax,
// and a draw over NaN weights fell through to the last token).
TEST(SamplerTest, NonFiniteLogitsFailTheSample) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  SamplingParams hot;
  hot.temperature = 0.8f;
  SamplingParams top_k = hot;
  top_k.top_k = 2;
  SamplingParams top_p = hot;
  top_p.top_p = 0.5f;
  SamplingParams penalized;
  penalized.repetition_penalty = 1.3f;
  SamplingParams logprobs;
  logprobs.top_logprobs = 2;
  for (float bad : {nan, inf, -nan}) {
    for (int64_t at : {0, 70, 199}) {  // in a vectorized chunk and in the tail
      std::vector<float> logits(200, 0.5f);
      logits[at] = bad;
      for (const SamplingParams& p : {Greedy(), hot, top_k, top_p, penalized, logprobs}) {
        try {
          SampleNext(logits.data(), 200, MakeSequence({0}, {}, 7), p);
          ADD_FAILURE() << "sampled from a row with " << bad << " at " << at;
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr("non-finite logits (NaN/inf)"));
        }
      }
    }
  }
  // -inf is a token ruled out, not an error.
  std::vector<float> logits(200, -inf);
  logits[3] = 1.0f;
  EXPECT_EQ(SampleNext(logits.data(), 200, MakeSequence({0}), hot).token, 3);
  EXPECT_FALSE(HasNanOrPosInf(logits.data(), 200));
  // A penalty that overflows a finite logit to +inf fails too (3e38 / 0.01).
  std::vector<float> big = {3e38f, 1.0f};
  SamplingParams strong;
  strong.repetition_penalty = 0.01f;
  EXPECT_THROW(SampleNext(big.data(), 2, MakeSequence({0}), strong), Error);
  // A NaN the grammar masks is neither drawn from nor in the logprobs (of the masked row).
  std::vector<float> masked = {1.0f, nan};
  const uint32_t first = 0b01;
  EXPECT_EQ(SampleNext(masked.data(), 2, MakeSequence({0}), Greedy(), &first).token, 0);
  EXPECT_EQ(SampleNext(masked.data(), 2, MakeSequence({0}), logprobs, &first).logprob, 0.0f);
  // A NaN held off by min_tokens is not drawn, but the logprobs' row (no min_tokens) holds it.
  const std::vector<int32_t> held = {1};
  EXPECT_THROW(SampleNext(masked.data(), 2, MakeSequence({0}), logprobs, nullptr, held), Error);
}

// As vLLM: under a grammar the logprobs are of the raw row with the disallowed tokens masked,
// renormalised over the allowed ones; the alternatives are allowed tokens only. Penalties and
// temperature shape the draw, never the logprobs.
TEST(SamplerTest, LogprobsUnderAGrammarAreOfTheAllowedTokens) {
  const std::vector<float> logits = {3.0f, 1.0f, 2.0f, 0.5f};
  const uint32_t allowed = 0b0110;  // tokens 1 and 2
  SamplingParams p = Greedy();
  p.top_logprobs = 3;
  p.repetition_penalty = 2.5f;
  const SampledToken out = SampleNext(logits.data(), 4, MakeSequence({0, 2}), p, &allowed);
  const float log_z = std::log(std::exp(1.0f) + std::exp(2.0f));
  EXPECT_EQ(out.token, 1);  // 2's logit 2 / 2.5 under the penalty is below 1
  EXPECT_NEAR(out.logprob, 1.0f - log_z, 1e-6f);
  ASSERT_EQ(out.top_logprobs.size(), 3u);
  EXPECT_EQ(out.top_logprobs[0].token, 2);
  EXPECT_NEAR(out.top_logprobs[0].logprob, 2.0f - log_z, 1e-6f);
  EXPECT_EQ(out.top_logprobs[1].token, 1);
  EXPECT_EQ(out.top_logprobs[2].logprob, -std::numeric_limits<float>::infinity());
}

// OpenAI's logit_bias: +100 makes a token the pick of every path (greedy, seeded draws, with
// penalties and filters), -100 bans one; the greedy fast path on the raw row must not skip it.
TEST(SamplerTest, LogitBiasForcesAndBansTokens) {
  const std::vector<float> logits = {2.0f, 5.0f, 4.0f, 1.0f, 3.0f};
  SamplingParams forced = Greedy();
  forced.logit_bias = {{3, 100.0f}};
  EXPECT_EQ(Sample(logits, MakeSequence({0}), forced), 3);
  SamplingParams hot = forced;
  hot.temperature = 1.5f;
  SamplingParams filtered = hot;
  filtered.top_k = 2;
  filtered.top_p = 0.5f;
  filtered.presence_penalty = 2.0f;  // after the bias: 3's 101 - 2 still wins
  for (uint64_t s = 0; s < 200; ++s) {
    EXPECT_EQ(Sample(logits, MakeSequence({0}, {}, s), hot), 3);
    EXPECT_EQ(Sample(logits, MakeSequence({0}, {3}, s), filtered), 3);
  }
  SamplingParams banned = Greedy();
  banned.logit_bias = {{1, -100.0f}};
  EXPECT_EQ(Sample(logits, MakeSequence({0}), banned), 2);
  banned.temperature = 1.0f;
  banned.logit_bias[2] = -100.0f;
  for (uint64_t s = 0; s < 500; ++s) {
    const int32_t t = Sample(logits, MakeSequence({0}, {}, s), banned);
    EXPECT_NE(t, 1);
    EXPECT_NE(t, 2);
  }
  // A small bias shifts the odds by exp(bias), as a logit would: 0 and 4 become even.
  SamplingParams even;
  even.temperature = 1.0f;
  even.logit_bias = {{0, 1.0f}, {1, -100.0f}, {2, -100.0f}, {3, -100.0f}};
  const std::vector<double> freq = Frequencies(logits, even);
  EXPECT_NEAR(freq[0], 0.5, 0.02);
  EXPECT_NEAR(freq[4], 0.5, 0.02);
  // Before the penalties, as vLLM: repetition_penalty divides the biased logit (3 + 4 = 7,
  // / 2 = 3.5 < 5), where penalizing first (3 / 2 + 4 = 5.5 > 5) would pick token 4.
  SamplingParams order = Greedy();
  order.logit_bias = {{4, 4.0f}};
  order.repetition_penalty = 2.0f;
  EXPECT_EQ(Sample({2.0f, 5.0f, 0.0f, 0.0f, 3.0f}, MakeSequence({4}), order), 1);
}

// vLLM's allowed_token_ids: only those are drawn, in every path; under a grammar the draw takes
// the tokens both allow, and none in common is an error rather than a token.
TEST(SamplerTest, AllowedTokenIdsRestrictTheDraw) {
  const std::vector<float> logits = {2.0f, 5.0f, 4.0f, 1.0f, 3.0f};
  SamplingParams p = Greedy();
  p.allowed_token_ids = std::vector<int32_t>{0, 3, 4};
  EXPECT_EQ(Sample(logits, MakeSequence({0}), p), 4);
  p.temperature = 3.0f;
  std::set<int32_t> seen;
  for (uint64_t s = 0; s < 500; ++s) seen.insert(Sample(logits, MakeSequence({0}, {}, s), p));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 3, 4}));
  const uint32_t grammar = 0b00110;  // 1 and 2
  p.allowed_token_ids = std::vector<int32_t>{2, 3};
  EXPECT_EQ(SampleNext(logits.data(), 5, MakeSequence({0}, {}, 1), p, &grammar).token, 2);
  p.allowed_token_ids = std::vector<int32_t>{0, 3};
  try {
    SampleNext(logits.data(), 5, MakeSequence({0}), p, &grammar);
    ADD_FAILURE() << "drew a token no mask allows";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("allowed_token_ids"));
  }
  // min_tokens holds its ids off within the allowed ones, unless they are all that is left.
  p = Greedy();
  p.allowed_token_ids = std::vector<int32_t>{3, 4};
  EXPECT_EQ(SampleNext(logits.data(), 5, MakeSequence({0}), p, nullptr,
                       std::vector<int32_t>{4}).token, 3);
  p.allowed_token_ids = std::vector<int32_t>{4};
  EXPECT_EQ(SampleNext(logits.data(), 5, MakeSequence({0}), p, nullptr,
                       std::vector<int32_t>{4}).token, 4);
}

// The draw reads logit_bias and allowed_token_ids from the tables built once per request (the
// engine builds them at submit): a list of any length is then not walked again at every draw.
TEST(SamplerTest, DrawReadsTheRequestTables) {
  const std::vector<float> logits = {2.0f, 5.0f, 4.0f, 1.0f, 3.0f};
  SamplingParams built = Greedy();
  built.allowed_token_ids = std::vector<int32_t>(100000, 3);
  built.allowed_token_ids->push_back(0);
  built.logit_bias = {{0, -1.0f}, {3, 0.5f}, {9, 1.0f}};  // 9: outside, skipped
  const SamplingTables tables = BuildSamplingTables(built, 5, std::vector<int32_t>{4});
  EXPECT_EQ(tables.bias, (std::vector<std::pair<int32_t, float>>{{0, -1.0f}, {3, 0.5f}}));
  EXPECT_EQ(tables.allowed, (std::vector<uint32_t>{0b11001}));
  // The params passed alongside say otherwise: the tables decide.
  SamplingParams p = Greedy();
  EXPECT_EQ(SampleNext(logits.data(), 5, MakeSequence({0}), p, nullptr, {}, &tables).token, 4);
  const uint32_t grammar = 0b01001;  // 0 and 3
  EXPECT_EQ(SampleNext(logits.data(), 5, MakeSequence({0}), p, &grammar, {}, &tables).token, 3);
}

// As vLLM v1's default logprobs_mode (raw_logprobs, taken before its logits processors): neither
// logit_bias nor allowed_token_ids enters the logprobs, which stay the raw row's (a grammar's
// mask does enter, as before).
TEST(SamplerTest, LogprobsIgnoreLogitBiasAndAllowedTokenIds) {
  const std::vector<float> logits = {2.0f, 5.0f, 4.0f, 1.0f, 3.0f};
  const std::vector<double> probs = Softmax(logits);
  SamplingParams p = Greedy();
  p.top_logprobs = 2;
  p.logit_bias = {{3, 100.0f}, {1, -50.0f}};
  p.allowed_token_ids = std::vector<int32_t>{1, 3};
  SampledToken out = SampleNext(logits.data(), 5, MakeSequence({0}), p);
  EXPECT_EQ(out.token, 3);
  EXPECT_NEAR(out.logprob, std::log(probs[3]), 1e-5);
  ASSERT_EQ(out.top_logprobs.size(), 2u);
  EXPECT_EQ(out.top_logprobs[0].token, 1);  // not in the draw's reach, still the model's best
  EXPECT_NEAR(out.top_logprobs[0].logprob, std::log(probs[1]), 1e-5);
  EXPECT_EQ(out.top_logprobs[1].token, 2);
  // Under a grammar: its mask only (tokens 2 and 3), not the bias.
  const uint32_t grammar = 0b01100;
  p.allowed_token_ids.reset();
  out = SampleNext(logits.data(), 5, MakeSequence({0}), p, &grammar);
  const double log_z = std::log(std::exp(4.0) + std::exp(1.0));
  EXPECT_EQ(out.token, 3);
  EXPECT_NEAR(out.logprob, 1.0 - log_z, 1e-5);
  EXPECT_EQ(out.top_logprobs[0].token, 2);
  EXPECT_NEAR(out.top_logprobs[0].logprob, 4.0 - log_z, 1e-5);
}

TEST(SamplingParamsTest, DefaultsAndBoundsAreValid) {
  EXPECT_NO_THROW(SamplingParams{}.Validate());
  SamplingParams p;
  p.temperature = 2.0f;
  p.top_k = 1;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.repetition_penalty = 0.01f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.top_logprobs = 20;
  p.n = 128;
  p.logit_bias = {{0, -100.0f}, {7, 100.0f}};
  p.allowed_token_ids = std::vector<int32_t>{0};
  EXPECT_NO_THROW(p.Validate());
  p.top_logprobs = -1;
  p.n = 1;
  p.min_p = 0.0f;
  p.top_p = 0.01f;
  EXPECT_NO_THROW(p.Validate());
}

TEST(SamplingParamsTest, RejectsEachBadFieldByName) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::string field;
    std::function<void(SamplingParams&)> set;
  };
  const std::vector<Case> cases = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [&](SamplingParams& p) { p.temperature = nan; }},
      {"temperature", [&](SamplingParams& p) { p.temperature = inf; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -1; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"top_p", [&](SamplingParams& p) { p.top_p = nan; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5f; }},
      {"min_p", [&](SamplingParams& p) { p.min_p = nan; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = -1.0f; }},
      {"repetition_penalty", [&](SamplingParams& p) { p.repetition_penalty = inf; }},
      {"repetition_penalty", [&](SamplingParams& p) { p.repetition_penalty = nan; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 1e-39f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0099f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 100.5f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = -2.01f; }},
      {"presence_penalty", [&](SamplingParams& p) { p.presence_penalty = nan; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = 3.0f; }},
      {"frequency_penalty", [&](SamplingParams& p) { p.frequency_penalty = -inf; }},
      {"top_logprobs", [](SamplingParams& p) { p.top_logprobs = -2; }},
      {"top_logprobs", [](SamplingParams& p) { p.top_logprobs = 21; }},
      {"n", [](SamplingParams& p) { p.n = 0; }},
      {"n", [](SamplingParams& p) { p.n = 129; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{3, 100.5f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{3, -101.0f}}; }},
      {"logit_bias", [&](SamplingParams& p) { p.logit_bias = {{3, nan}}; }},
      {"logit_bias", [&](SamplingParams& p) { p.logit_bias = {{3, inf}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }},
      {"allowed_token_ids", [](SamplingParams& p) { p.allowed_token_ids.emplace(); }},
      {"allowed_token_ids",
       [](SamplingParams& p) { p.allowed_token_ids = std::vector<int32_t>{1, -2}; }},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.set(p);
    try {
      p.Validate();
      ADD_FAILURE() << c.field << ": accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_THAT(message, HasSubstr(c.field));
      // The message names this field, not another one that contains it.
      if (c.field == "n") {
        EXPECT_THAT(message, ::testing::StartsWith("n "));
      }
      if (c.field == "top_p") {
        EXPECT_THAT(message, ::testing::Not(HasSubstr("min_p")));
      }
    }
  }
}

}  // namespace
}  // namespace latent::engine
