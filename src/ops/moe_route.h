// Mixture-of-experts routers of the DeepSeek family, per token, on f32 router logits [E].
// Each writes the k chosen experts and their weights (already times routed_scaling_factor).
#pragma once

#include <cstdint>

namespace latent::ops {

// How scores are made from the router logits, and how the top k are chosen (config.json's
// scoring_func and topk_method).
enum class ScoringFunc : uint8_t { kSoftmax, kSigmoid };
enum class TopkMethod : uint8_t { kGreedy, kGroupLimitedGreedy, kNoauxTc, kGroupTop2 };
const char* TopkMethodName(TopkMethod method);
const char* ScoringFuncName(ScoringFunc func);

struct RouteArgs {
  const float* logits = nullptr;  // [E] router logits (hidden . gate^T, f32)
  int64_t num_experts = 0;        // E
  int64_t top_k = 0;              // k
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
  const float* bias = nullptr;  // [E] e_score_correction_bias (noaux_tc, LongCat): for choice only.
  // noaux_tc: the experts of the groups not kept compete with a choice score of 0 (A.X-K2's
  // router) rather than -inf (DeepSeek V3's); they win over kept experts whose biased score is
  // below 0.
  bool dropped_groups_score_zero = false;
  int32_t* experts = nullptr;   // [k] out
  float* weights = nullptr;     // [k] out
  float* scratch = nullptr;     // [2 * E + n_group]
};

// DeepSeek V2: softmax scores, the k best. With a bias (LongCat), the k best of scores + bias,
// weighted by their unbiased scores.
void RouteSoftmaxGreedy(const RouteArgs& args);
// DeepSeek V2: softmax scores; groups ranked by their best expert, the topk_group best groups
// kept (others scored 0), then the k best.
void RouteSoftmaxGroupLimited(const RouteArgs& args);
// DeepSeek V3 / Kimi K2: sigmoid scores plus the correction bias for choice; groups ranked by
// the sum of their two best biased scores; the k best in the kept groups (others -inf, or 0 with
// dropped_groups_score_zero);
// weights are the unbiased sigmoid scores, renormalised when norm_topk_prob.
void RouteSigmoidNoauxTc(const RouteArgs& args);
// Mistral 4: softmax scores (in the hidden dtype: f32 here); groups ranked by the sum of their two
// best scores, the topk_group best kept (others scored 0), then the k best; weights are the
// unmasked scores, renormalised when norm_topk_prob. No correction bias.
void RouteSoftmaxGroupTop2(const RouteArgs& args);

// The router of a (scoring, topk_method) pair: every router kind behind one function. Throws
// latent::Error for a pair no family uses (softmax + noaux_tc, sigmoid + greedy).
using RouteFn = void (*)(const RouteArgs&);
RouteFn RouterFor(ScoringFunc scoring, TopkMethod method);

}  // namespace latent::ops
