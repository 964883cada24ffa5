// GLM-5-Next's KPool indexer ops (src/ops/kpool) against a direct evaluation of transformers'
// Glm5NextTextIndexer: pool keys as a per-channel softmax-weighted sum of the pool's keys, and
// the selection (top pools among the complete visible ones, expanded to tokens, plus the tail)
// as a mask over all positions, built the way the reference builds it (scores of invalid pools
// at the float minimum, top-k over all pools, invalid picks dropped, tail appended).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "ops/kpool.h"
#include "random_test_util.h"

namespace latent {
namespace {

using test::Random;

TEST(KPoolTest, PoolKeysAreSoftmaxWeightedPerChannel) {
  ops::KPoolDims d;
  d.head_dim = 6;
  d.pool = 4;
  const int64_t pools = 3;
  const std::vector<float> packed = Random(pools * d.pool * d.packed(), 1);
  const std::vector<float> ape = Random(d.pool * d.head_dim, 2, 0.5f);
  std::vector<float> keys(pools * d.head_dim);
  ops::KPoolKeys(d, packed.data(), pools, ape.data(), keys.data());
  for (int64_t p = 0; p < pools; ++p)
    for (int64_t c = 0; c < d.head_dim; ++c) {
      double denom = 0, num = 0;
      for (int64_t i = 0; i < d.pool; ++i) {
        const float* row = &packed[(p * d.pool + i) * d.packed()];
        const double e = std::exp(double(row[d.head_dim + c]) + ape[i * d.head_dim + c]);
        denom += e;
        num += e * row[c];
      }
      EXPECT_NEAR(keys[p * d.head_dim + c], num / denom, 1e-5) << p << " " << c;
    }
}

// transformers' selection for a query at `position` in a sequence of `length` tokens, as the set
// of attended positions.
std::vector<int32_t> ReferenceSelection(const ops::KPoolDims& d, const std::vector<float>& all_scores,
                                        int64_t position, int64_t length) {
  const int64_t pools = length / d.pool;  // complete pools of the whole sequence (pool_valid)
  std::vector<float> masked(pools);
  std::vector<bool> valid(pools);
  for (int64_t p = 0; p < pools; ++p) {
    valid[p] = (p + 1) * d.pool - 1 <= position;  // its last token is visible
    masked[p] = valid[p] ? all_scores[p] : std::numeric_limits<float>::lowest();
  }
  const int64_t k = std::min(d.topk_pools, pools);
  std::vector<int32_t> order(pools);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return masked[a] > masked[b]; });
  std::vector<bool> attend(position + 1, false);
  for (int64_t i = 0; i < k; ++i) {
    if (!valid[order[i]]) continue;
    for (int64_t j = 0; j < d.pool; ++j) attend[order[i] * d.pool + j] = true;
  }
  const int64_t visible = position + 1, tail = visible % d.pool;
  for (int64_t j = visible - tail; j < visible; ++j) attend[j] = true;
  std::vector<int32_t> out;
  for (int64_t p = 0; p <= position; ++p)
    if (attend[p]) out.push_back(static_cast<int32_t>(p));
  return out;
}

TEST(KPoolTest, SelectionMatchesTheReferenceMaskAtEveryPosition) {
  ops::KPoolDims d;
  d.head_dim = 4;
  for (int64_t pool : {1, 4, 16}) {
    for (int64_t topk_pools : {1, 2, 3}) {
      d.pool = pool;
      d.topk_pools = topk_pools;
      const int64_t length = 7 * pool + pool / 2;
      const std::vector<float> scores = Random(length / pool, static_cast<uint32_t>(pool * 10 + topk_pools));
      std::vector<int32_t> order, chosen;
      int64_t sparse = 0;
      for (int64_t position = 0; position < length; ++position) {
        const int64_t eligible = (position + 1) / pool;
        const std::vector<float> mine(scores.begin(), scores.begin() + eligible);
        ops::KPoolSelect(d, mine, position, order, chosen);
        std::vector<int32_t> got = chosen;
        if (got.empty()) {  // dense: every position
          got.resize(position + 1);
          std::iota(got.begin(), got.end(), 0);
        } else {
          ++sparse;
          EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
          EXPECT_EQ(static_cast<int64_t>(got.size()), topk_pools * pool + (position + 1) % pool);
        }
        EXPECT_EQ(got, ReferenceSelection(d, scores, position, length))
            << "pool " << pool << " topk_pools " << topk_pools << " position " << position;
      }
      EXPECT_GT(sparse, 0) << "no position selected sparsely";
    }
  }
}

TEST(KPoolTest, TiedScoresKeepTheLowerPools) {
  ops::KPoolDims d;
  d.head_dim = 2;
  d.pool = 2;
  d.topk_pools = 2;
  std::vector<int32_t> order, chosen;
  ops::KPoolSelect(d, {0.0f, 1.0f, 0.0f, 1.0f}, 8, order, chosen);
  EXPECT_EQ(chosen, (std::vector<int32_t>{2, 3, 6, 7, 8}));  // pools 1 and 3, tail {8}
  ops::KPoolSelect(d, {0.0f, 0.0f, 0.0f, 0.0f}, 7, order, chosen);
  EXPECT_EQ(chosen, (std::vector<int32_t>{0, 1, 2, 3}));  // no tail at a pool boundary
}

}  // namespace
}  // namespace latent
