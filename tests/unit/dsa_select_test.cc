// The DSA indexer's top-k (ops::SelectTopK) against a full sort of every position under the
// selection's order: the larger score first, equal scores by the lower position (-0 equal to +0),
// the kept positions in ascending order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "ops/dsa_indexer.h"

namespace latent {
namespace {

std::vector<int32_t> SortedTopK(const std::vector<float>& scores, int64_t topk) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  std::vector<int32_t> chosen(order.begin(), order.begin() + topk);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

TEST(DsaSelectTest, KeepsTheLargestWithTiesToTheLowerPosition) {
  std::mt19937 rng(7);
  std::vector<uint64_t> keys;
  std::vector<int32_t> chosen;
  for (int64_t n : {2, 3, 17, 64, 1000, 4099}) {
    for (int levels : {2, 5, 1 << 20}) {  // few levels: most positions tie at the boundary
      std::vector<float> scores(n);
      std::uniform_int_distribution<int> level(0, levels - 1);
      for (float& s : scores) s = static_cast<float>(level(rng) - levels / 2) * 0.25f;
      for (float& s : scores) {
        if (s == 0.0f && (rng() & 1)) s = -0.0f;  // -0 ties with +0
      }
      for (int64_t topk : {int64_t{1}, n / 2, n - 1}) {
        if (topk < 1) continue;
        ops::SelectTopK(scores, topk, keys, chosen);
        EXPECT_EQ(chosen, SortedTopK(scores, topk)) << "n " << n << " levels " << levels
                                                    << " topk " << topk;
      }
    }
  }
}

TEST(DsaSelectTest, InfinitiesRankAtTheirEnds) {
  const float inf = INFINITY;
  const std::vector<float> scores = {1.0f, -inf, inf, 0.0f, -inf, inf, 2.0f};
  std::vector<uint64_t> keys;
  std::vector<int32_t> chosen;
  ops::SelectTopK(scores, 3, keys, chosen);
  EXPECT_EQ(chosen, (std::vector<int32_t>{2, 5, 6}));
  ops::SelectTopK(scores, 6, keys, chosen);
  EXPECT_EQ(chosen, (std::vector<int32_t>{0, 1, 2, 3, 5, 6}));  // the first -inf of the two
}

TEST(DsaSelectTest, NaNScoresStillKeepExactlyTopKPositions) {
  const std::vector<float> scores = {1.0f, NAN, 3.0f, -NAN, 0.5f, 2.0f};
  std::vector<uint64_t> keys;
  std::vector<int32_t> chosen;
  for (int64_t topk = 1; topk < 6; ++topk) {
    ops::SelectTopK(scores, topk, keys, chosen);
    ASSERT_EQ(static_cast<int64_t>(chosen.size()), topk);
    EXPECT_TRUE(std::is_sorted(chosen.begin(), chosen.end()));
    EXPECT_EQ(std::adjacent_find(chosen.begin(), chosen.end()), chosen.end());
  }
}

}  // namespace
}  // namespace latent
