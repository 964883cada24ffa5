#include "ops/moe.h"

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "base/profile.h"
#include "kernels/kernel_table.h"
#include "kernels/linear.h"

namespace latent::ops {
namespace {

using kernels::Linear;

}  // namespace

void FfnWorkspace::Reserve(int64_t tokens, int64_t inter, const MoeDims* moe) {
  if (moe != nullptr) {
    const int64_t scored = moe->experts + moe->zero_experts;
    router_logits.Get(tokens * scored);
    route_scratch.Get(2 * scored + moe->n_group);
    experts.Get(tokens * moe->top_k);
    weights.Get(tokens * moe->top_k);
    token_of.Get(tokens * moe->top_k);
    weight_of.Get(tokens * moe->top_k);
    // One expert sees each token at most once: at most T rows.
    gathered.Get(tokens * moe->hidden);
    expert_out.Get(tokens * moe->hidden);
    shared.Get(tokens * moe->hidden);
  }
  gate.Get(tokens * inter);
  up.Get(tokens * inter);
}

void MlpForward(const MlpWeights& w, const float* x, int64_t tokens, float* out, float swiglu_limit,
                FfnWorkspace* workspace) {
  FfnWorkspace own;
  FfnWorkspace& ws = workspace != nullptr ? *workspace : own;
  const int64_t inter = w.gate.n;
  // [T, inter] each: a 2048-token chunk through the dense MLP needs 90 MB apiece, which glibc
  // would otherwise map, page-fault and zero at every call.
  float* gate = ws.gate.Get(tokens * inter);
  float* up = ws.up.Get(tokens * inter);
  Linear(x, tokens, w.gate, gate);
  Linear(x, tokens, w.up, up);
  if (swiglu_limit > 0) {
    for (int64_t i = 0; i < tokens * inter; ++i) {
      gate[i] = std::min(gate[i], swiglu_limit);
      up[i] = std::clamp(up[i], -swiglu_limit, swiglu_limit);
    }
  }
  kernels::BestKernels().silu_mul(gate, up, tokens * inter, gate);
  Linear(gate, tokens, w.down, out);
}

void RouteTokens(const MoeDims& c, const MoeWeights& w, const float* x, int64_t tokens,
                 int32_t* experts, float* weights, FfnWorkspace* workspace) {
  FfnWorkspace own;
  FfnWorkspace& ws = workspace != nullptr ? *workspace : own;
  const RouteFn route = RouterFor(c.scoring, c.topk_method);
  const int64_t e = c.experts + c.zero_experts;
  const int64_t d = c.hidden;
  kernels::WeightRef router{w.router.data(), DType::kF32, e, d};
  float* logits = ws.router_logits.Get(tokens * e);  // [T, E + Z]
  Linear(x, tokens, router, logits);
  float* scratch = ws.route_scratch.Get(2 * e + c.n_group);
  for (int64_t t = 0; t < tokens; ++t) {
    ops::RouteArgs args;
    args.logits = &logits[t * e];
    args.num_experts = e;
    args.top_k = c.top_k;
    args.n_group = c.n_group;
    args.topk_group = c.topk_group;
    args.norm_topk_prob = c.norm_topk_prob;
    args.routed_scaling_factor = c.routed_scaling_factor;
    args.bias = w.bias.empty() ? nullptr : w.bias.data();
    args.dropped_groups_score_zero = c.dropped_groups_score_zero;
    args.experts = experts + t * c.top_k;
    args.weights = weights + t * c.top_k;
    args.scratch = scratch;
    route(args);
  }
}

void MoeForward(const MoeDims& c, const MoeWeights& w, const float* x, int64_t tokens, float* out,
                std::vector<int32_t>* chosen, const SumPartials& sum_partials,
                FfnWorkspace* workspace) {
  FfnWorkspace own;
  FfnWorkspace& ws = workspace != nullptr ? *workspace : own;
  const int64_t d = c.hidden;
  const int64_t k = c.top_k;
  int32_t* experts = ws.experts.Get(tokens * k);  // [T, k]
  float* weights = ws.weights.Get(tokens * k);     // [T, k]
  {
    LATENT_PROFILE_SCOPE(kRouter);
    RouteTokens(c, w, x, tokens, experts, weights, &ws);
  }
  if (chosen != nullptr) {
    chosen->assign(experts, experts + tokens * k);
    for (int64_t t = 0; t < tokens; ++t) std::sort(chosen->begin() + t * k, chosen->begin() + (t + 1) * k);
  }

  {
  LATENT_PROFILE_SCOPE(kExperts);
  std::fill(out, out + tokens * d, 0.0f);
  int64_t* token_of = ws.token_of.Get(tokens * k);
  float* weight_of = ws.weight_of.Get(tokens * k);
  const bool sharded = w.held_end >= 0;
  LATENT_CHECK(!sharded || sum_partials);
  const int64_t first = sharded ? w.held_begin : 0;
  const int64_t end = sharded ? w.held_end : c.experts;
  for (int64_t e = first; e < end; ++e) {
    int64_t m = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        if (experts[t * k + j] != e) continue;
        token_of[m] = t;
        weight_of[m] = weights[t * k + j];
        ++m;
      }
    }
    if (m == 0) continue;
    float* gathered = ws.gathered.Get(m * d);
    float* expert_out = ws.expert_out.Get(m * d);
    for (int64_t i = 0; i < m; ++i) std::copy(x + token_of[i] * d, x + (token_of[i] + 1) * d, &gathered[i * d]);
    MlpForward(w.experts[e], gathered, m, expert_out, c.swiglu_limit, &ws);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c2 = 0; c2 < d; ++c2) out[token_of[i] * d + c2] += expert_out[i * d + c2] * weight_of[i];
  }
  if (sharded) sum_partials(out, tokens * d);  // (the communicator times itself)
  // Identity experts (indices E..E+Z-1), after the routed ones as transformers adds them.
  for (int64_t e = c.experts; e < c.experts + c.zero_experts; ++e) {
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        if (experts[t * k + j] != e) continue;
        for (int64_t c2 = 0; c2 < d; ++c2) out[t * d + c2] += x[t * d + c2] * weights[t * k + j];
      }
    }
  }
  }
  if (w.shared) {
    LATENT_PROFILE_SCOPE(kSharedExperts);
    float* shared = ws.shared.Get(tokens * d);
    MlpForward(*w.shared, x, tokens, shared, c.clamp_shared ? c.swiglu_limit : 0.0f, &ws);
    for (int64_t i = 0; i < tokens * d; ++i) out[i] += shared[i];
  }
}

}  // namespace latent::ops
