// The shared blocks added for the gated MLA families (src/ops): the attention output gate (per
// channel and per head), the gated RMSNorm, and noaux_tc's choice of fill for dropped groups.
// Each against a direct scalar evaluation of its formula.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/gated_norm.h"
#include "ops/moe_route.h"
#include "ops/output_gate.h"
#include "random_test_util.h"

namespace latent::ops {
namespace {

using test::Random;

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(OutputGateTest, PerChannelAndPerHead) {
  const int64_t tokens = 3, heads = 2, v = 5;
  const std::vector<float> attn = Random(tokens * heads * v, 1);
  for (int64_t width : {v, int64_t{1}}) {
    const std::vector<float> gate = Random(tokens * heads * width, 2);
    std::vector<float> out = attn;
    ApplyOutputGate({heads, v, width}, gate.data(), tokens, out.data());
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t c = 0; c < v; ++c) {
          const int64_t i = (t * heads + h) * v + c;
          const float g = gate[(t * heads + h) * width + (width == 1 ? 0 : c)];
          EXPECT_NEAR(out[i], attn[i] * Sigmoid(g), 1e-6) << "width " << width << " at " << i;
        }
      }
    }
  }
}

TEST(GatedRmsNormTest, MatchesTheFormula) {
  const int64_t rows = 4, d = 7, rank = 3;
  const float eps = 1e-6f;
  const std::vector<float> x = Random(rows * d, 3), norm_w = Random(d, 4);
  const std::vector<float> down = Random(rank * d, 5), up = Random(d * rank, 6);
  NormGateWeights gate;
  gate.down = {down.data(), DType::kF32, rank, d};
  gate.up = {up.data(), DType::kF32, d, rank};
  std::vector<float> out(rows * d);
  GatedRmsNorm(x.data(), rows, d, {norm_w.data(), DType::kF32}, gate, eps, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t i = 0; i < d; ++i) sq += double(x[r * d + i]) * x[r * d + i];
    const double inv = 1.0 / std::sqrt(sq / d + eps);
    std::vector<double> y(d), h(rank);
    for (int64_t i = 0; i < d; ++i) y[i] = x[r * d + i] * inv * norm_w[i];
    for (int64_t j = 0; j < rank; ++j) {
      double s = 0;
      for (int64_t i = 0; i < d; ++i) s += down[j * d + i] * y[i];
      h[j] = s * Sigmoid(s);  // SiLU
    }
    for (int64_t i = 0; i < d; ++i) {
      double g = 0;
      for (int64_t j = 0; j < rank; ++j) g += up[i * rank + j] * h[j];
      EXPECT_NEAR(out[r * d + i], y[i] * Sigmoid(g), 1e-5) << "row " << r << " channel " << i;
    }
  }
}

TEST(GatedRmsNormTest, InPlace) {
  const int64_t rows = 2, d = 6, rank = 2;
  std::vector<float> x = Random(rows * d, 7);
  const std::vector<float> norm_w(d, 1.0f), down = Random(rank * d, 8), up = Random(d * rank, 9);
  NormGateWeights gate{{down.data(), DType::kF32, rank, d}, {up.data(), DType::kF32, d, rank}};
  std::vector<float> expected(rows * d);
  GatedRmsNorm(x.data(), rows, d, {norm_w.data(), DType::kF32}, gate, 1e-6f, expected.data());
  GatedRmsNorm(x.data(), rows, d, {norm_w.data(), DType::kF32}, gate, 1e-6f, x.data());
  EXPECT_EQ(x, expected);
}

// Two groups of two experts, top 2, topk_group 1: group 0 wins on its top-2 sum, but one of its
// experts has a negative biased score. V3 (-inf) still picks it; A.X-K2 (0) picks a dropped one.
TEST(NoauxTcTest, DroppedGroupsScoreMinusInfinityOrZero) {
  const float logits[4] = {3.0f, -2.0f, -1.0f, -1.5f};
  const float bias[4] = {0.0f, 1.0f, -0.1f, 0.0f};  // choice: 0.95, 1.12 | 0.17, 0.18
  const float bias_negative[4] = {0.5f, -0.2f, -0.5f, -0.5f};  // 1.45, -0.08 | -0.23, -0.32
  int32_t experts[2];
  float weights[2];
  std::vector<float> scratch(2 * 4 + 2);
  RouteArgs a;
  a.logits = logits;
  a.num_experts = 4;
  a.top_k = 2;
  a.n_group = 2;
  a.topk_group = 1;
  a.norm_topk_prob = true;
  a.routed_scaling_factor = 1.0f;
  a.experts = experts;
  a.weights = weights;
  a.scratch = scratch.data();
  a.bias = bias;
  for (bool zero : {false, true}) {  // all kept choices positive: both fills agree
    a.dropped_groups_score_zero = zero;
    RouteSigmoidNoauxTc(a);
    EXPECT_EQ(std::min(experts[0], experts[1]), 0);
    EXPECT_EQ(std::max(experts[0], experts[1]), 1);
  }
  a.bias = bias_negative;
  a.dropped_groups_score_zero = false;
  RouteSigmoidNoauxTc(a);
  EXPECT_EQ(std::min(experts[0], experts[1]), 0);
  EXPECT_EQ(std::max(experts[0], experts[1]), 1);
  a.dropped_groups_score_zero = true;
  RouteSigmoidNoauxTc(a);
  EXPECT_EQ(experts[0], 0);
  EXPECT_EQ(experts[1], 2);  // a dropped expert at 0 beats expert 1's -0.08 (ties: lower index)
  const double s0 = Sigmoid(3.0), s2 = Sigmoid(-1.0);
  EXPECT_NEAR(weights[0], s0 / (s0 + s2), 1e-6);
  EXPECT_NEAR(weights[1], s2 / (s0 + s2), 1e-6);
}

}  // namespace
}  // namespace latent::ops
