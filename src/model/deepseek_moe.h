// The feed-forward block of DeepSeek layers: a SiLU-gated MLP, or routed experts plus shared
// experts.
#pragma once

#include <vector>

#include "model/deepseek_weights.h"
#include "ops/moe_route.h"

namespace latent::model {

using RouteFn = void (*)(const ops::RouteArgs&);

// x [T, D] -> out [T, D]
void MlpForward(const MlpWeights& w, const float* x, int64_t tokens, float* out);

// Router choices: experts [T, k] and weights [T, k].
void RouteTokens(const ModelConfig& config, const MoeWeights& w, RouteFn route, const float* x,
                 int64_t tokens, int32_t* experts, float* weights);

// x [T, D] -> out [T, D]: sum over chosen experts in ascending expert order (as transformers
// accumulates), plus the shared experts. When `chosen` is given it receives the experts [T, k],
// ascending per token.
void MoeForward(const ModelConfig& config, const MoeWeights& w, RouteFn route, const float* x,
                int64_t tokens, float* out, std::vector<int32_t>* chosen = nullptr);

}  // namespace latent::model
