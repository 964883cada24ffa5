// Hyper-connections: the residual stream widened to N streams per token, [T, N, D] in f32
// (DeepSeek V4's form; Hy4's "iHC" keeps each stream and only gates what enters and leaves a
// block). Around each block (attention, feed-forward) one hyper-connection computes, from the
// token's N streams flattened to N*D values,
//   mixes = (fn . flat) * rsqrt(mean(flat^2) + norm_eps)             [M]
//   pre   = sigmoid(mixes[0:N]  * scale[0] + base[0:N])  + gate_eps   [N]
//   post  = post_magnitude * sigmoid(mixes[N:2N] * scale[1] + base[N:2N]) + gate_eps  [N]
// the block reads x = sum_n pre[n] * stream[n] (CollapseStreams) and its output y goes back as
//   stream[n] = post[n] * y + residual[n]                              (ExpandStreams)
// where the residual is the stream itself (Hy4). The manifold-constrained variant (mHC: DeepSeek
// V4, GLM-5-Next) adds a third output, comb [N, N] (mixes[2N:2N+N*N] * scale[2] + base, made
// doubly stochastic by Sinkhorn iterations), and its residual is sum_m comb[m][n] * stream[m]:
// HyperConnectionDims::mix_streams selects it, HyperGates::comb carries it:
//   comb  = softmax_n(mixes[2N + m*N + n] * scale[2] + base[2N + m*N + n]) + gate_eps
//   comb /= column sums + gate_eps; then sinkhorn_iters - 1 times: rows, then columns, likewise
// (DeepseekV4HyperConnection, which GLM-5-Next reuses; mHC's post gate adds no gate_eps).
// The model's head collapses the streams once more with its own weights (HyperHeadCollapse), or
// (GLM-5-Next) by their plain mean (MeanCollapseStreams).
#pragma once

#include <cstdint>
#include <vector>

namespace latent::ops {

struct HyperConnectionDims {
  int64_t streams = 0;          // N (hc_mult)
  int64_t hidden = 0;           // D
  float norm_eps = 1e-6f;       // of the unweighted RMS over the N*D flattened values
  float gate_eps = 1e-6f;       // hc_eps, added to every sigmoid gate
  float post_magnitude = 2.0f;  // hc_magnitude
  bool post_gate_eps = true;    // gate_eps added to post too (Hy4); mHC's post has none
  bool mix_streams = false;     // mHC's comb, Sinkhorn-normalised
  int64_t sinkhorn_iters = 20;  // hc_sinkhorn_iters (mix_streams only)
  int64_t flat() const { return streams * hidden; }
  // Rows of fn and base: pre and post, plus comb's N*N when the streams mix.
  int64_t gate_rows() const { return 2 * streams + (mix_streams ? streams * streams : 0); }
};

// One hyper-connection's parameters, f32 (transformers keeps them in f32).
struct HyperConnectionWeights {
  std::vector<float> fn;     // [gate_rows, N*D]
  std::vector<float> base;   // [gate_rows]
  std::vector<float> scale;  // [2] (pre, post), [3] with comb
};

// The head's collapse: pre = sigmoid(mixes * scale + base) + gate_eps over N rows, no post.
struct HyperHeadWeights {
  std::vector<float> fn;     // [N, N*D]
  std::vector<float> base;   // [N]
  std::vector<float> scale;  // [1]
};

// Per token, what one hyper-connection computed from its streams.
struct HyperGates {
  std::vector<float> pre;   // [T, N]
  std::vector<float> post;  // [T, N]
  std::vector<float> comb;  // [T, N, N] comb[t][m][n]: stream m's share in residual n; empty: none
};

// The gates of the hyper-connection `w` for the streams [T, N, D] (with mix_streams, comb too).
HyperGates ComputeHyperGates(const HyperConnectionDims& dims, const HyperConnectionWeights& w,
                             const float* streams, int64_t tokens);

// x [T, D] = sum_n pre[t, n] * streams[t, n, :].
void CollapseStreams(const HyperConnectionDims& dims, const float* pre, const float* streams,
                     int64_t tokens, float* x);

// streams [T, N, D] <- post[t, n] * branch[t, :] + residual[t, n, :], the residual being the
// streams themselves, or with gates.comb sum_m comb[t, m, n] * streams[t, m, :].
void ExpandStreams(const HyperConnectionDims& dims, const HyperGates& gates, const float* branch,
                   int64_t tokens, float* streams);

// streams [T, N, D] <- x [T, D] copied into each of the N streams (the embedding's expansion).
void BroadcastStreams(const HyperConnectionDims& dims, const float* x, int64_t tokens, float* streams);

// comb [N, N] in place: the Sinkhorn normalisation of mHC (softmax rows + eps, then alternate
// column and row normalisation with eps in the denominators), as DeepSeek V4 computes it in f32.
void SinkhornNormalize(const HyperConnectionDims& dims, float* comb);

// x [T, D] = the mean of each token's N streams (GLM-5-Next's head: no weights).
void MeanCollapseStreams(const HyperConnectionDims& dims, const float* streams, int64_t tokens, float* x);

// x [T, D] = the head's collapse of the streams [T, N, D].
void HyperHeadCollapse(const HyperConnectionDims& dims, const HyperHeadWeights& w,
                       const float* streams, int64_t tokens, float* x);

}  // namespace latent::ops
