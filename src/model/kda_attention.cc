#include "model/kda_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/dump.h"
#include "base/error.h"
#include "kernels/linear.h"
#include "model/cache_rows.h"

namespace latent::model {

void KdaAttentionForward(const ops::KdaDims& dims, const ops::KdaWeights& w, KdaForgetGateKind gate,
                         float norm_eps, int64_t layer, const ForwardBatch& batch, const float* x,
                         int64_t hidden, float* out) {
  const int64_t T = static_cast<int64_t>(batch.token_ids.size());
  const int64_t c = dims.channels(), H = dims.heads, d = dims.head_dim;
  const cache::StateSlots& states = batch.rows->states;
  if (states.empty()) FailInternal("a KDA layer ran on a cache without per-sequence state");
  // [T, 3C] the q|k|v projections, then (in place per sequence) their convolution.
  std::vector<float> proj(T * c), mixed(T * 3 * c), conv(T * 3 * c);
  const kernels::WeightRef* qkv[3] = {&w.q, &w.k, &w.v};
  for (int i = 0; i < 3; ++i) {
    kernels::Linear(x, T, *qkv[i], proj.data());
    for (int64_t t = 0; t < T; ++t) std::memcpy(&mixed[t * 3 * c + i * c], &proj[t * c], c * sizeof(float));
  }
  std::vector<float> g(T * c), beta(T * H);  // [T, C], [T, H]
  switch (gate) {
    case KdaForgetGateKind::kKimi: ops::KimiForgetGate(dims, w.forget, x, T, g.data()); break;
    case KdaForgetGateKind::kGlm5Next: ops::Glm5NextForgetGate(dims, w.forget, x, T, g.data()); break;
    case KdaForgetGateKind::kFullRank:
      LATENT_CHECK(w.forget_full && w.g_full);
      ops::FullRankForgetGate(dims, *w.forget_full, x, T, g.data());
      break;
  }
  kernels::Linear(x, T, w.b, beta.data());
  for (float& b : beta) b = 1.0f / (1.0f + std::exp(-b));
  std::vector<float> core(T * c);  // [T, H, dv]
  std::vector<float> q, k;
  for (int64_t s = 0; s < batch.num_sequences(); ++s) {
    const int64_t first = batch.seq_starts[s], n = batch.seq_starts[s + 1] - first;
    const int64_t position = batch.positions[first];
    const int32_t slot = batch.StateSlot(s);
    if (slot < 0 || slot >= states.num_slots) {
      FailInternal("batch sequence ", s, " has state slot ", slot, " of ", states.num_slots);
    }
    float* conv_state = states.At(slot, layer, kKdaConvRow);
    float* state = states.At(slot, layer, kKdaStateRow);
    float* block = states.At(slot, layer, kKdaBlockRow);
    if (position == 0) {  // A new (or recomputed) sequence: no history.
      std::fill_n(conv_state, dims.conv_values(), 0.0f);
      std::fill_n(state, dims.state_values(), 0.0f);
    }
    float* rows = &conv[first * 3 * c];
    ops::KdaShortConv(dims, w, &mixed[first * 3 * c], n, conv_state, rows);
    // Normalised q and k of this sequence, [n, C] each, written back into the conv buffer.
    q.resize(n * c);
    k.resize(n * c);
    for (int64_t t = 0; t < n; ++t) {
      std::memcpy(&q[t * c], rows + t * 3 * c, c * sizeof(float));
      std::memcpy(&k[t * c], rows + t * 3 * c + c, c * sizeof(float));
    }
    ops::KdaNormalizeQk(dims, q.data(), k.data(), n);
    for (int64_t t = 0; t < n; ++t) {
      std::memcpy(rows + t * 3 * c, &q[t * c], c * sizeof(float));
      std::memcpy(rows + t * 3 * c + c, &k[t * c], c * sizeof(float));
    }
    ops::KdaChunked(dims, rows, rows + c, rows + 2 * c, 3 * c, &g[first * c], &beta[first * H], n,
                    position, state, block, &core[first * c]);
  }
  // The output gate and norm, then o_proj.
  std::vector<float> gate_values(T * c), normed(T * c);
  if (gate == KdaForgetGateKind::kFullRank) {
    kernels::Linear(x, T, *w.g_full, gate_values.data());
  } else {
    std::vector<float> low(T * d);
    kernels::Linear(x, T, w.g_a, low.data());
    kernels::Linear(low.data(), T, w.g_b, gate_values.data());
  }
  ops::KdaGatedNorm(dims, core.data(), gate_values.data(), T, w.o_norm, norm_eps, normed.data());
  kernels::Linear(normed.data(), T, w.o, out);
  dump::Tensor("attn_out", layer, out, T, hidden);
}

}  // namespace latent::model
