// The routed experts of ops::MoeForward run one per thread when enough of them are active, each
// linear split across the threads otherwise, and their outputs are added in expert order in waves
// of at most 32 MiB. Whatever ran where, the output must be the bits of the plain loop (expert by
// expert, each one's rows in token order, added to the output as it finishes), for any thread
// count: that is what keeps a token's output independent of the rest of its batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "ops/moe.h"
#include "threads/thread_pool.h"

namespace latent {
namespace {

struct ExpertsUnderTest {
  ops::MoeDims dims;
  std::vector<std::vector<float>> matrices;  // owns the weights
  ops::MoeWeights weights;

  ExpertsUnderTest(int64_t hidden, int64_t experts, int64_t top_k, bool shared) {
    dims.hidden = hidden;
    dims.experts = experts;
    dims.top_k = top_k;
    dims.norm_topk_prob = true;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    auto matrix = [&](int64_t n, int64_t k) {
      matrices.emplace_back(n * k);
      for (float& v : matrices.back()) v = normal(rng);
      return kernels::WeightRef{matrices.back().data(), DType::kF32, n, k};
    };
    auto mlp = [&](int64_t inter) {
      return ops::MlpWeights{matrix(inter, hidden), matrix(inter, hidden), matrix(hidden, inter)};
    };
    weights.router.resize(experts * hidden);
    for (float& v : weights.router) v = normal(rng);
    for (int64_t e = 0; e < experts; ++e) weights.experts.push_back(mlp(8 + e % 3));
    if (shared) weights.shared = mlp(12);
  }
};

std::vector<float> ExpertTestInput(int64_t tokens, int64_t hidden, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(tokens * hidden);
  for (float& v : x) v = normal(rng);
  return x;
}

// The plain loop, on one thread: each expert on its rows (tokens ascending), added as it ends.
std::vector<float> PlainExpertLoop(const ExpertsUnderTest& moe, const std::vector<float>& x,
                                   int64_t tokens) {
  const int64_t d = moe.dims.hidden, k = moe.dims.top_k;
  std::vector<int32_t> experts(tokens * k);
  std::vector<float> weights(tokens * k);
  ops::RouteTokens(moe.dims, moe.weights, x.data(), tokens, experts.data(), weights.data());
  std::vector<float> out(tokens * d, 0.0f);
  for (int64_t e = 0; e < moe.dims.experts; ++e) {
    std::vector<int64_t> rows;
    std::vector<float> row_weights;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        if (experts[t * k + j] != e) continue;
        rows.push_back(t);
        row_weights.push_back(weights[t * k + j]);
      }
    }
    if (rows.empty()) continue;
    const int64_t m = static_cast<int64_t>(rows.size());
    std::vector<float> in(m * d), y(m * d);
    for (int64_t i = 0; i < m; ++i) std::copy(&x[rows[i] * d], &x[(rows[i] + 1) * d], &in[i * d]);
    ops::MlpForward(moe.weights.experts[e], in.data(), m, y.data());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < d; ++c) out[rows[i] * d + c] += y[i * d + c] * row_weights[i];
    }
  }
  if (moe.weights.shared) {
    std::vector<float> shared(tokens * d);
    ops::MlpForward(*moe.weights.shared, x.data(), tokens, shared.data());
    for (int64_t i = 0; i < tokens * d; ++i) out[i] += shared[i];
  }
  return out;
}

class MoeExperts : public ::testing::Test {
 protected:
  void TearDown() override { threads::SetNumThreads(saved_threads_); }

  // MoeForward under 1, 2 and 3 threads, with and without a reused workspace, against the loop.
  void ExpectPlainLoopBits(const ExpertsUnderTest& moe, int64_t tokens, unsigned seed) {
    const std::vector<float> x = ExpertTestInput(tokens, moe.dims.hidden, seed);
    threads::SetNumThreads(1);
    const std::vector<float> expected = PlainExpertLoop(moe, x, tokens);
    ops::FfnWorkspace reused;
    for (int threads : {1, 2, 3}) {
      threads::SetNumThreads(threads);
      for (ops::FfnWorkspace* ws : {static_cast<ops::FfnWorkspace*>(nullptr), &reused}) {
        std::vector<float> out(tokens * moe.dims.hidden);
        MoeForward(moe.dims, moe.weights, x.data(), tokens, out.data(), nullptr, {}, ws);
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_EQ(out[i], expected[i]) << tokens << " tokens, " << threads << " threads, "
                                         << (ws ? "reused" : "own") << " workspace, at " << i;
        }
      }
    }
  }

 private:
  int saved_threads_ = threads::NumThreads();
};

TEST_F(MoeExperts, ManyActiveExpertsRunOnePerThreadWithThePlainLoopsBits) {
  const ExpertsUnderTest moe(32, 16, 4, /*shared=*/true);
  ExpectPlainLoopBits(moe, 9, 1);   // most experts active: one expert per thread
  ExpectPlainLoopBits(moe, 64, 2);  // every expert active, several rows each
}

TEST_F(MoeExperts, FewActiveExpertsSplitEachLinearWithThePlainLoopsBits) {
  const ExpertsUnderTest moe(32, 16, 2, /*shared=*/false);
  ExpectPlainLoopBits(moe, 1, 3);  // 2 active experts: fewer than 2 per thread
}

TEST_F(MoeExperts, OutputsBeyondOneWaveAreAddedInExpertOrder) {
  // 4096 hidden values: a 32 MiB wave holds 2048 rows, and 700 tokens x 3 experts make 2100, so
  // the experts run in two waves.
  const ExpertsUnderTest moe(4096, 6, 3, /*shared=*/false);
  ExpectPlainLoopBits(moe, 700, 4);
}

}  // namespace
}  // namespace latent
