// Expert parallelism at the op level, without MPI: the routed experts split into contiguous
// shards (model::ExpertShard), each shard's MoeForward computing only its experts, and the
// partial sums added in shard order give the one-process output (to float rounding), with the
// shared and identity experts added once, after the sum.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/load_options.h"
#include "ops/moe.h"

namespace latent {
namespace {

struct RandomMoe {
  ops::MoeDims dims;
  std::vector<std::vector<float>> buffers;  // owns the expert matrices
  ops::MoeWeights weights;

  RandomMoe(int64_t experts, int64_t zero_experts, bool shared) {
    dims.hidden = 16;
    dims.experts = experts;
    dims.zero_experts = zero_experts;
    dims.top_k = 3;
    dims.norm_topk_prob = true;
    const int64_t inter = 8;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    auto matrix = [&](int64_t n, int64_t k) {
      buffers.emplace_back(n * k);
      for (float& v : buffers.back()) v = normal(rng);
      return kernels::WeightRef{buffers.back().data(), DType::kF32, n, k};
    };
    auto mlp = [&](int64_t i) {
      return ops::MlpWeights{matrix(i, dims.hidden), matrix(i, dims.hidden), matrix(dims.hidden, i)};
    };
    weights.router.resize((experts + zero_experts) * dims.hidden);
    for (float& v : weights.router) v = normal(rng);
    for (int64_t e = 0; e < experts; ++e) weights.experts.push_back(mlp(inter));
    if (shared) weights.shared = mlp(2 * inter);
  }
};

std::vector<float> RandomInput(int64_t tokens, int64_t hidden) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(tokens * hidden);
  for (float& v : x) v = normal(rng);
  return x;
}

// Every shard's MoeForward on the same input, partial sums gathered and added in shard order
// (what parallel::Communicator::SumInRankOrder does across ranks).
std::vector<float> ShardedForward(const RandomMoe& moe, const std::vector<float>& x,
                                  int64_t tokens, int ranks) {
  const int64_t n = tokens * moe.dims.hidden;
  std::vector<std::vector<float>> partials(ranks);
  std::vector<std::vector<float>> outs(ranks, std::vector<float>(n));
  // In one process the shards run in turn: each one's sum_partials records its partial (and
  // leaves it as the "sum"), and the real sum is formed afterwards.
  for (int r = 0; r < ranks; ++r) {
    ops::MoeWeights w = moe.weights;
    const model::ExpertShard shard{r, ranks};
    w.held_begin = shard.Begin(moe.dims.experts);
    w.held_end = shard.End(moe.dims.experts);
    MoeForward(moe.dims, w, x.data(), tokens, outs[r].data(), nullptr,
               [&](float* data, int64_t count) { partials[r].assign(data, data + count); });
  }
  // The identity and shared experts are added after the sum, identically on every shard: the
  // output of shard r is (its partial) + rest, so rest = out[r] - partial[r] is shard-independent.
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) {
    float sum = partials[0][i];
    for (int r = 1; r < ranks; ++r) sum += partials[r][i];
    out[i] = sum + (outs[0][i] - partials[0][i]);
  }
  return out;
}

TEST(ExpertShard, ContiguousRangesCoverEveryExpertOnce) {
  for (int ranks : {1, 2, 3, 4, 8}) {
    for (int64_t experts : {1, 12, 64, 256, 384}) {
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const model::ExpertShard shard{r, ranks};
        EXPECT_EQ(shard.Begin(experts), next);
        EXPECT_LE(shard.End(experts) - shard.Begin(experts), (experts + ranks - 1) / ranks);
        next = shard.End(experts);
      }
      EXPECT_EQ(next, experts);
    }
  }
}

TEST(MoeShards, PartialSumsEqualOneProcess) {
  for (bool shared : {false, true}) {
    for (int64_t zero : {0, 2}) {
      const RandomMoe moe(12, zero, shared);
      const int64_t tokens = 9;
      const std::vector<float> x = RandomInput(tokens, moe.dims.hidden);
      std::vector<float> full(tokens * moe.dims.hidden);
      MoeForward(moe.dims, moe.weights, x.data(), tokens, full.data());
      float scale = 0;
      for (float v : full) scale = std::max(scale, std::abs(v));
      for (int ranks : {2, 3, 4}) {
        const std::vector<float> sharded = ShardedForward(moe, x, tokens, ranks);
        for (size_t i = 0; i < full.size(); ++i) {
          ASSERT_NEAR(sharded[i], full[i], 1e-5f * scale)
              << "ranks " << ranks << " shared " << shared << " identity " << zero << " at " << i;
        }
      }
    }
  }
}

TEST(MoeShards, ShardedWithoutASumFails) {
  const RandomMoe moe(4, 0, false);
  ops::MoeWeights w = moe.weights;
  w.held_begin = 0;
  w.held_end = 2;
  const std::vector<float> x = RandomInput(1, moe.dims.hidden);
  std::vector<float> out(moe.dims.hidden);
  EXPECT_ANY_THROW(MoeForward(moe.dims, w, x.data(), 1, out.data()));
}

}  // namespace
}  // namespace latent
