#include "ops/moe.h"

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "base/profile.h"
#include "kernels/kernel_table.h"
#include "kernels/linear.h"
#include "ops/lanes.h"
#include "threads/thread_pool.h"

namespace latent::ops {
namespace {

using kernels::Linear;

// MlpForward's arithmetic with the caller's pre-activation buffers gate, up [T, I].
void MlpInto(const MlpWeights& w, const float* x, int64_t tokens, float* out, float swiglu_limit,
             float* gate, float* up) {
  const int64_t inter = w.gate.n;
  Linear(x, tokens, w.gate, gate);
  Linear(x, tokens, w.up, up);
  threads::ParallelRows(tokens, inter, [&](int64_t t0, int64_t t1) {
    float* g = gate + t0 * inter;  // [t1 - t0, inter]
    float* u = up + t0 * inter;
    const int64_t count = (t1 - t0) * inter;
    if (swiglu_limit > 0) {
      for (int64_t i = 0; i < count; ++i) {
        g[i] = std::min(g[i], swiglu_limit);
        u[i] = std::clamp(u[i], -swiglu_limit, swiglu_limit);
      }
    }
    kernels::BestKernels().silu_mul(g, u, count, g);
  });
  Linear(gate, tokens, w.down, out);
}

// A wave's expert outputs are kept until they are added up in expert order; past this many bytes
// of them (or one expert's rows, if more) a new wave starts.
constexpr int64_t kWaveBytes = int64_t{32} << 20;

// out[token_of[i]] += routed[i - i0] * weight_of[i] for the wave's rows [i0, i1), each token's
// rows in ascending i (expert order, as one loop over the rows would add them), the tokens
// shared out over the threads.
void AddWaveRows(int64_t i0, int64_t i1, const int64_t* token_of, const float* weight_of,
                 const float* routed, int64_t d, float* out, FfnWorkspace& ws) {
  int64_t tokens = 0;
  for (int64_t i = i0; i < i1; ++i) tokens = std::max(tokens, token_of[i] + 1);
  if (tokens == 0) return;
  // The rows grouped by token: token t's are rows[start[t] .. start[t + 1]), ascending.
  int64_t* start = ws.wave_token_start.Get(tokens + 1);
  int64_t* fill = ws.wave_token_fill.Get(tokens);
  int64_t* rows = ws.wave_token_rows.Get(i1 - i0);
  std::fill(start, start + tokens + 1, 0);
  for (int64_t i = i0; i < i1; ++i) ++start[token_of[i] + 1];
  for (int64_t t = 0; t < tokens; ++t) start[t + 1] += start[t];
  std::copy(start, start + tokens, fill);
  for (int64_t i = i0; i < i1; ++i) rows[fill[token_of[i]]++] = i;
  const int64_t per_token = (i1 - i0 + tokens - 1) / tokens;
  threads::ParallelRows(tokens, per_token * d, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* o = out + t * d;
      for (int64_t r = start[t]; r < start[t + 1]; ++r) {
        const float* y = routed + (rows[r] - i0) * d;
        const float w = weight_of[rows[r]];
        for (int64_t c = 0; c < d; ++c) o[c] += y[c] * w;
      }
    }
  });
}

// Runs the held routed experts [0, held) (local indices; global first + e) on the rows grouped by
// expert (rows of expert e: [begin[e], begin[e + 1]) of token_of / weight_of) and adds each
// row's weighted output to out [T, D]: each token's rows in expert index order (AddWaveRows),
// whatever ran in parallel, so the sums are the same bits for any thread count.
void RunRoutedExperts(const MoeDims& c, const MoeWeights& w, const float* x, int64_t first,
                      int64_t held, const int64_t* begin, const int64_t* token_of,
                      const float* weight_of, float* out, FfnWorkspace& ws) {
  const int64_t d = c.hidden;
  int64_t widest = 0;
  for (int64_t e = 0; e < held; ++e) widest = std::max(widest, begin[e + 1] - begin[e]);
  if (widest == 0) return;
  const int64_t wave_rows = std::max(widest, std::min(begin[held], kWaveBytes / (d * 4)));
  float* routed = ws.routed.Get(wave_rows * d);  // [wave rows, D]
  std::vector<int64_t> active;                   // experts of the wave with rows
  for (int64_t e0 = 0; e0 < held;) {
    int64_t e1 = e0;
    while (e1 < held && begin[e1 + 1] - begin[e0] <= wave_rows) ++e1;
    active.clear();
    for (int64_t e = e0; e < e1; ++e) {
      if (begin[e + 1] > begin[e]) active.push_back(e);
    }
    // One expert per thread when there are enough of them to share out evenly: no barrier
    // between an expert's three linears, each thread streams whole experts. Otherwise each
    // linear is split across the threads. The kernels give the same bits either way.
    const int64_t threads = threads::NumThreads();
    const bool per_thread = threads > 1 && static_cast<int64_t>(active.size()) >= 2 * threads;
    auto run = [&](FfnWorkspace::ExpertLane& lane, int64_t e) {
      const int64_t m = begin[e + 1] - begin[e];
      const int64_t inter = w.experts[first + e].gate.n;
      float* gathered = lane.gathered.Get(m * d);  // [m, D]
      for (int64_t i = 0; i < m; ++i) {
        const float* row = x + token_of[begin[e] + i] * d;
        std::copy(row, row + d, &gathered[i * d]);
      }
      float* y = routed + (begin[e] - begin[e0]) * d;  // [m, D]
      MlpInto(w.experts[first + e], gathered, m, y, c.swiglu_limit, lane.gate.Get(m * inter),
              lane.up.Get(m * inter));
    };
    if (per_thread) {
      // The experts with the most rows first (ties in expert order), so that the last ones to
      // start are short and the threads end together. Each expert writes its own rows of
      // `routed`, added below in expert order: the order they run in changes no bits.
      std::stable_sort(active.begin(), active.end(), [&](int64_t a, int64_t b) {
        return begin[a + 1] - begin[a] > begin[b + 1] - begin[b];
      });
      const int64_t count = static_cast<int64_t>(active.size());
      ForEachInLanes(ws.expert_lanes, count, [&](int64_t lane, int64_t i) {
        run(*ws.expert_lanes.lanes[lane], active[i]);
      });
    } else {
      ws.expert_lanes.Reserve(1);
      for (int64_t e : active) run(*ws.expert_lanes.lanes[0], e);
    }
    AddWaveRows(begin[e0], begin[e1], token_of, weight_of, routed, d, out, ws);
    e0 = e1;
  }
}

}  // namespace

void FfnWorkspace::Reserve(int64_t tokens, int64_t inter, const MoeDims* moe) {
  if (moe != nullptr) {
    const int64_t scored = moe->experts + moe->zero_experts;
    router_logits.Get(tokens * scored);
    route_scratch.Get(2 * scored + moe->n_group);
    experts.Get(tokens * moe->top_k);
    weights.Get(tokens * moe->top_k);
    expert_rows.Get(moe->experts + 1);
    token_of.Get(tokens * moe->top_k);
    weight_of.Get(tokens * moe->top_k);
    wave_token_start.Get(tokens + 1);
    wave_token_fill.Get(tokens);
    wave_token_rows.Get(tokens * moe->top_k);
    shared.Get(tokens * moe->hidden);
    // The experts' lanes and wave buffer grow to the largest expert seen (most steps route far
    // fewer than T rows to one expert).
    expert_lanes.Reserve(threads::NumThreads());
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
  MlpInto(w, x, tokens, out, swiglu_limit, ws.gate.Get(tokens * inter), ws.up.Get(tokens * inter));
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
  const bool sharded = w.held_end >= 0;
  LATENT_CHECK(!sharded || sum_partials);
  const int64_t first = sharded ? w.held_begin : 0;
  const int64_t held = (sharded ? w.held_end : c.experts) - first;
  // Group the (token, choice) pairs by held expert, tokens ascending within one (counting sort).
  int64_t* begin = ws.expert_rows.Get(held + 1);  // [held + 1]
  std::fill(begin, begin + held + 1, 0);
  for (int64_t i = 0; i < tokens * k; ++i) {
    const int64_t e = experts[i] - first;
    if (e >= 0 && e < held) ++begin[e + 1];
  }
  for (int64_t e = 0; e < held; ++e) begin[e + 1] += begin[e];
  int64_t* token_of = ws.token_of.Get(tokens * k);
  float* weight_of = ws.weight_of.Get(tokens * k);
  std::vector<int64_t> next(begin, begin + held);  // [held] each expert's next free row
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = experts[t * k + j] - first;
      if (e < 0 || e >= held) continue;
      token_of[next[e]] = t;
      weight_of[next[e]] = weights[t * k + j];
      ++next[e];
    }
  }
  RunRoutedExperts(c, w, x, first, held, begin, token_of, weight_of, out, ws);
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
