#include "engine/logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace latent::engine {
namespace {

TEST(LogprobsTest, LogPartitionIsLogSumExp) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, -1.0f, 0.5f};
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v));
  EXPECT_NEAR(LogPartition(logits.data(), 5), std::log(sum), 1e-6);
  // Large logits stay finite (the max is taken out first).
  const std::vector<float> large = {1000.0f, 999.0f, -1000.0f};
  EXPECT_NEAR(LogPartition(large.data(), 3), 1000.0 + std::log1p(std::exp(-1.0)), 1e-3);
}

// The order SampleNext always gave: larger logit first, equal logits by ascending token id.
std::vector<int32_t> SortedOrder(const std::vector<float>& v) {
  std::vector<int32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  return order;
}

TEST(LogprobsTest, TopLogprobsAreTheBestFirstWithTiesByTokenId) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t vocab = 1 + static_cast<int64_t>(rng() % 60);
    std::vector<float> logits(vocab);
    // Few distinct values: many ties.
    for (float& v : logits) v = static_cast<float>(static_cast<int>(rng() % 7) - 3) * 0.5f;
    const float log_z = LogPartition(logits.data(), vocab);
    const std::vector<int32_t> expected = SortedOrder(logits);
    for (int32_t n : {0, 1, 3, 20}) {
      std::vector<TokenLogprob> top = {{99, 9.0f}};  // Cleared first.
      TopLogprobs(logits.data(), vocab, n, log_z, top);
      ASSERT_EQ(static_cast<int64_t>(top.size()), std::min<int64_t>(n, vocab));
      for (size_t i = 0; i < top.size(); ++i) {
        EXPECT_EQ(top[i].token, expected[i]) << "trial " << trial << " n " << n << " rank " << i;
        EXPECT_FLOAT_EQ(top[i].logprob, logits[expected[i]] - log_z);
      }
    }
  }
}

}  // namespace
}  // namespace latent::engine
