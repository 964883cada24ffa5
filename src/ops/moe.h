// The feed-forward blocks of DeepSeek-like layers: a SiLU-gated MLP, and a mixture of experts
// (router, routed experts, shared experts), on their own small dims, not the model's config.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "base/scratch.h"
#include "kernels/weight_ref.h"
#include "ops/moe_route.h"

namespace latent::ops {

struct MlpWeights {
  kernels::WeightRef gate, up, down;  // [I, D], [I, D], [D, I]
};

struct MoeWeights {
  std::vector<float> router;  // [E + Z, D] f32
  std::vector<float> bias;    // [E + Z] e_score_correction_bias (noaux_tc, LongCat), else empty
  std::vector<MlpWeights> experts;  // [E]; only [held_begin, held_end) loaded
  std::optional<MlpWeights> shared;
  // Expert parallelism: the routed experts this process holds and computes; -1: all of them.
  int64_t held_begin = 0, held_end = -1;
};

struct MoeDims {
  int64_t hidden = 0;       // D
  int64_t experts = 0;      // E routed experts
  // Z identity ("zero-computation") experts after the routed ones (LongCat): the router scores
  // E + Z experts, and a chosen index e >= E adds weight * x.
  int64_t zero_experts = 0;
  int64_t top_k = 0;        // k experts per token
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
  ScoringFunc scoring = ScoringFunc::kSoftmax;
  TopkMethod topk_method = TopkMethod::kGreedy;
  bool dropped_groups_score_zero = false;  // RouteArgs' field of that name (A.X-K2)
  // The routed experts' SwiGLU clamp (Hy4, GLM-5-Next): gate <= limit, -limit <= up <= limit
  // before silu(gate) * up; 0: none. The shared experts are not clamped.
  float swiglu_limit = 0.0f;
  // GLM-5-Next: the shared experts' SwiGLU is clamped at swiglu_limit too (Hy4's is not).
  bool clamp_shared = false;
};

// The scratch of MlpForward and MoeForward, reused across calls: sized once for the largest step
// (Reserve; a model sizes it at engine start for the engine's token budget), a step then
// allocates nothing. A call without one allocates its own (tests, one-off calls).
struct FfnWorkspace {
  // Room for `tokens` tokens through an MLP of up to `inter` intermediate values and, with
  // `moe`, through that MoE's router and experts.
  void Reserve(int64_t tokens, int64_t inter, const MoeDims* moe);

  Scratch<float> gate, up;             // [T, I] an MLP's pre-activations
  Scratch<float> router_logits;        // [T, E + Z]
  Scratch<float> route_scratch;        // [2 (E + Z) + n_group] one token's router scratch
  Scratch<int32_t> experts;            // [T, k] the router's choices
  Scratch<float> weights;              // [T, k] and their weights
  Scratch<int64_t> expert_rows;        // [E + 1] where each expert's rows start in token_of
  Scratch<int64_t> token_of;           // [T, k] the tokens routed to each expert, by expert
  Scratch<float> weight_of;            // [T, k] their weights
  // A wave's rows grouped by token (AddWaveRows): [T + 1] starts, [T] fill cursors, [T, k] rows.
  Scratch<int64_t> wave_token_start, wave_token_fill, wave_token_rows;
  Scratch<float> routed;               // [rows, D] the outputs of one wave of experts
  Scratch<float> shared;               // [T, D] the shared experts' output

  // One thread's memory while routed experts run in parallel, one expert per thread.
  struct ExpertLane {
    Scratch<float> gathered;  // [m, D] the expert's input rows
    Scratch<float> gate, up;  // [m, I] its pre-activations
  };
  struct ExpertLanes {
    void Reserve(int64_t n) {  // on the calling thread, before a loop uses them
      while (static_cast<int64_t>(lanes.size()) < n) {
        lanes.push_back(std::make_unique<ExpertLane>());
      }
    }
    std::vector<std::unique_ptr<ExpertLane>> lanes;  // stable addresses as lanes are added
  };
  ExpertLanes expert_lanes;
};

// x [T, D] -> out [T, D] = down(silu(gate(x)) * up(x)); with `swiglu_limit` > 0 the gate
// pre-activations are clamped from above at it and the up ones to [-limit, limit] first.
void MlpForward(const MlpWeights& w, const float* x, int64_t tokens, float* out,
                float swiglu_limit = 0.0f, FfnWorkspace* workspace = nullptr);

// Router choices: experts [T, k] and weights [T, k], by the router of dims' scoring and method.
void RouteTokens(const MoeDims& dims, const MoeWeights& w, const float* x, int64_t tokens,
                 int32_t* experts, float* weights, FfnWorkspace* workspace = nullptr);

// Sums the routed experts' partial outputs [n] of every process in place (expert parallelism:
// parallel::Communicator::SumInRankOrder), the same bits on every process.
using SumPartials = std::function<void(float* data, int64_t n)>;

// x [T, D] -> out [T, D]: sum over chosen experts in ascending expert order (as transformers
// accumulates; identity experts last, being the highest indices), plus the shared experts. When
// `chosen` is given it receives the experts [T, k], ascending per token.
// Expert parallelism (w.held_end >= 0): only the held experts run, their sum (in ascending order)
// goes through `sum_partials` (required then), and the identity and shared experts are added
// after it on every process.
void MoeForward(const MoeDims& dims, const MoeWeights& w, const float* x, int64_t tokens,
                float* out, std::vector<int32_t>* chosen = nullptr,
                const SumPartials& sum_partials = {}, FfnWorkspace* workspace = nullptr);

}  // namespace latent::ops
