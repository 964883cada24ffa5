#include "ops/moe_route.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "base/error.h"

namespace latent::ops {
namespace {

// Indices of the k largest values (ties to the lower index), written to `out`.
void TopK(const float* values, int64_t n, int64_t k, int32_t* out) {
  // n is small (experts or groups); an insertion pass keeps it allocation-free.
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t pos = count < k ? count : k;
    if (pos == k && !(values[i] > values[out[k - 1]])) continue;
    if (pos == k) --pos;
    while (pos > 0 && values[i] > values[out[pos - 1]]) {
      out[pos] = out[pos - 1];
      --pos;
    }
    out[pos] = static_cast<int32_t>(i);
    if (count < k) ++count;
  }
}

void Softmax(const float* x, int64_t n, float* out) {
  float max_value = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max_value = std::max(max_value, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += out[i] = std::exp(x[i] - max_value);
  for (int64_t i = 0; i < n; ++i) out[i] /= sum;
}

// Keeps the experts of the `topk_group` best groups in `scores`, setting the rest to `fill`.
void MaskGroups(float* scores, const float* group_scores, const RouteArgs& a, float fill) {
  std::vector<int32_t> chosen(a.topk_group);
  TopK(group_scores, a.n_group, a.topk_group, chosen.data());
  const int64_t per_group = a.num_experts / a.n_group;
  for (int64_t g = 0; g < a.n_group; ++g) {
    if (std::find(chosen.begin(), chosen.end(), g) != chosen.end()) continue;
    std::fill(scores + g * per_group, scores + (g + 1) * per_group, fill);
  }
}

}  // namespace

void RouteSoftmaxGreedy(const RouteArgs& a) {
  float* scores = a.scratch;
  Softmax(a.logits, a.num_experts, scores);
  if (a.bias != nullptr) {
    // LongCat: the correction bias shifts the choice; the weights stay the unbiased scores.
    float* choice = a.scratch + a.num_experts;
    for (int64_t e = 0; e < a.num_experts; ++e) choice[e] = scores[e] + a.bias[e];
    TopK(choice, a.num_experts, a.top_k, a.experts);
  } else {
    TopK(scores, a.num_experts, a.top_k, a.experts);
  }
  for (int64_t i = 0; i < a.top_k; ++i) a.weights[i] = scores[a.experts[i]] * a.routed_scaling_factor;
}

void RouteSoftmaxGroupLimited(const RouteArgs& a) {
  float* scores = a.scratch;
  float* group_scores = a.scratch + 2 * a.num_experts;
  Softmax(a.logits, a.num_experts, scores);
  const int64_t per_group = a.num_experts / a.n_group;
  for (int64_t g = 0; g < a.n_group; ++g) {
    group_scores[g] = *std::max_element(scores + g * per_group, scores + (g + 1) * per_group);
  }
  float* masked = a.scratch + a.num_experts;
  std::copy(scores, scores + a.num_experts, masked);
  MaskGroups(masked, group_scores, a, 0.0f);
  TopK(masked, a.num_experts, a.top_k, a.experts);
  for (int64_t i = 0; i < a.top_k; ++i) a.weights[i] = masked[a.experts[i]] * a.routed_scaling_factor;
}

void RouteSigmoidNoauxTc(const RouteArgs& a) {
  float* scores = a.scratch;
  float* choice = a.scratch + a.num_experts;
  float* group_scores = a.scratch + 2 * a.num_experts;
  for (int64_t e = 0; e < a.num_experts; ++e) {
    scores[e] = 1.0f / (1.0f + std::exp(-a.logits[e]));
    choice[e] = scores[e] + (a.bias != nullptr ? a.bias[e] : 0.0f);
  }
  const int64_t per_group = a.num_experts / a.n_group;
  for (int64_t g = 0; g < a.n_group; ++g) {
    int32_t best[2];
    TopK(choice + g * per_group, per_group, 2, best);
    group_scores[g] = choice[g * per_group + best[0]] + choice[g * per_group + best[1]];
  }
  MaskGroups(choice, group_scores, a, a.dropped_groups_score_zero ? 0.0f : -INFINITY);
  TopK(choice, a.num_experts, a.top_k, a.experts);
  float sum = 0.0f;
  for (int64_t i = 0; i < a.top_k; ++i) sum += a.weights[i] = scores[a.experts[i]];
  const float denominator = a.norm_topk_prob ? sum + 1e-20f : 1.0f;
  for (int64_t i = 0; i < a.top_k; ++i) {
    a.weights[i] = a.weights[i] / denominator * a.routed_scaling_factor;
  }
}

void RouteSoftmaxGroupTop2(const RouteArgs& a) {
  float* scores = a.scratch;
  float* masked = a.scratch + a.num_experts;
  float* group_scores = a.scratch + 2 * a.num_experts;
  Softmax(a.logits, a.num_experts, scores);
  const int64_t per_group = a.num_experts / a.n_group;
  for (int64_t g = 0; g < a.n_group; ++g) {
    int32_t best[2];
    TopK(scores + g * per_group, per_group, 2, best);
    group_scores[g] = scores[g * per_group + best[0]] + scores[g * per_group + best[1]];
  }
  std::copy(scores, scores + a.num_experts, masked);
  MaskGroups(masked, group_scores, a, 0.0f);
  TopK(masked, a.num_experts, a.top_k, a.experts);
  float sum = 0.0f;
  for (int64_t i = 0; i < a.top_k; ++i) sum += a.weights[i] = scores[a.experts[i]];
  const float denominator = a.norm_topk_prob ? sum + 1e-20f : 1.0f;
  for (int64_t i = 0; i < a.top_k; ++i) {
    a.weights[i] = a.weights[i] / denominator * a.routed_scaling_factor;
  }
}

const char* TopkMethodName(TopkMethod method) {
  switch (method) {
    case TopkMethod::kGreedy: return "greedy";
    case TopkMethod::kGroupLimitedGreedy: return "group_limited_greedy";
    case TopkMethod::kNoauxTc: return "noaux_tc";
    case TopkMethod::kGroupTop2: return "group_top2";
  }
  return "?";
}

const char* ScoringFuncName(ScoringFunc func) {
  return func == ScoringFunc::kSoftmax ? "softmax" : "sigmoid";
}

RouteFn RouterFor(ScoringFunc scoring, TopkMethod method) {
  if (scoring == ScoringFunc::kSoftmax && method == TopkMethod::kGreedy) return RouteSoftmaxGreedy;
  if (scoring == ScoringFunc::kSoftmax && method == TopkMethod::kGroupLimitedGreedy) {
    return RouteSoftmaxGroupLimited;
  }
  if (scoring == ScoringFunc::kSigmoid && method == TopkMethod::kNoauxTc) return RouteSigmoidNoauxTc;
  if (scoring == ScoringFunc::kSoftmax && method == TopkMethod::kGroupTop2) {
    return RouteSoftmaxGroupTop2;
  }
  Fail("no router for scoring_func '", ScoringFuncName(scoring), "' with topk_method '",
       TopkMethodName(method), "'");
}

}  // namespace latent::ops
