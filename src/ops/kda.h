// Kimi Delta Attention (KDA, transformers' kimi_linear / bailing_hybrid / glm5_next linear layers):
// gated delta-rule linear attention with a per-channel forget gate. Per head, with a state
// S [dk, dv] and per token l2-normalised q, k (q also times dk^-1/2), v, log-decay g [dk] (<= 0)
// and write strength beta in (0, 1):
//   S = diag(exp(g)) S;  S += k (beta (v - S^T k))^T;  o = S^T q.
// The blocks of a KDA layer sit here on their own dims (never ModelConfig), so the hybrid
// families share them: the short causal convolution (+ SiLU) over the q|k|v projections, the
// forget gates, and two kernels over a sequence's tokens:
//  - KdaRecurrent, the reference: the recurrence above, token by token;
//  - KdaChunked, the prefill kernel: the chunked (WY) form of transformers'
//    chunk_kimi_delta_attention over chunks of kKdaChunk tokens aligned to absolute positions.
//    The state is read, not written, inside a chunk and updated once per chunk; the rows of the
//    current chunk computed so far are kept (the "block" state), so a chunk may be computed in
//    any number of calls. Each token's output is computed by the same operations in the same
//    order whichever call computes it, so chunked prefill, batching and preemption give
//    bit-identical outputs.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/weight_ref.h"
#include "ops/norm.h"

namespace latent::ops {

// Tokens per chunk of KdaChunked (transformers' chunk_size).
inline constexpr int64_t kKdaChunk = 64;

struct KdaDims {
  int64_t heads = 0;        // H
  int64_t head_dim = 0;     // dk = dv
  int64_t conv_kernel = 4;  // K: the short convolution's taps
  // GLM-5-Next's forget gate bound (Glm5NextForgetGate); unused by the other gates.
  float gate_lower_bound = -5.0f;
  int64_t channels() const { return heads * head_dim; }  // C: q, k and v channels each
  // Floats of one sequence's state pieces:
  int64_t conv_values() const { return (conv_kernel - 1) * 3 * channels(); }  // [K-1, 3C]
  int64_t state_values() const { return heads * head_dim * head_dim; }        // [H, dk, dv]
  // [kKdaChunk, H, row]: per row k, cumulative g, v, v_new (dk each), beta, and its row of the
  // chunk's triangular solve (kKdaChunk).
  int64_t row_values() const { return 4 * head_dim + 1 + kKdaChunk; }
  int64_t block_values() const { return kKdaChunk * heads * row_values(); }
};

// Kimi Linear's forget gate: g = -exp(A_log_h) * softplus(f_b(f_a(x)) + dt_bias), per channel.
struct KdaForgetGateWeights {
  kernels::WeightRef f_a;       // [dk, D]
  kernels::WeightRef f_b;       // [C, dk]
  std::vector<float> dt_bias;   // [C]
  std::vector<float> a_log;     // [H]
};

// bailing_hybrid's forget gate, full rank: z = f(x) + dt_bias per channel, then
//   with a lower bound b (kda_safe_gate): g = b * sigmoid(exp(A_log_h) * z), so every decay
//   exp(g) stays in [exp(b), 1];
//   without: Kimi's form g = -exp(A_log_h) * softplus(z).
struct KdaFullRankGateWeights {
  kernels::WeightRef f;                   // [C, D]
  std::vector<float> dt_bias;             // [C]
  std::vector<float> a_log;               // [H]
  std::optional<float> safe_lower_bound;  // set: the safe (bounded) gate
};

struct KdaWeights {
  kernels::WeightRef q, k, v;                    // [C, D] each
  std::vector<float> q_conv, k_conv, v_conv;     // [C, K] each (depthwise, no bias)
  KdaForgetGateWeights forget;
  kernels::WeightRef b;                          // [H, D]: beta = sigmoid(b x)
  kernels::WeightRef g_a, g_b;                   // [dk, D], [C, dk]: the output gate
  NormWeight o_norm;                             // [dv]
  kernels::WeightRef o;                          // [D, C]
  // bailing_hybrid: full-rank forget and output gates in place of `forget` and g_a / g_b.
  std::optional<KdaFullRankGateWeights> forget_full;
  std::optional<kernels::WeightRef> g_full;      // [C, D]: output gate logits g_full x
};

// g [rows, C] = Kimi's forget gate of x [rows, D].
void KimiForgetGate(const KdaDims& dims, const KdaForgetGateWeights& w, const float* x, int64_t rows,
                    float* g);

// g [rows, C] = GLM-5-Next's forget gate of x [rows, D]:
// dims.gate_lower_bound * sigmoid(exp(A_log_h) * (f_b(f_a(x)) + dt_bias)), per channel.
void Glm5NextForgetGate(const KdaDims& dims, const KdaForgetGateWeights& w, const float* x,
                        int64_t rows, float* g);

// g [rows, C] = bailing_hybrid's full-rank forget gate of x [rows, D] (safe or Kimi's form).
void FullRankForgetGate(const KdaDims& dims, const KdaFullRankGateWeights& w, const float* x,
                        int64_t rows, float* g);

// Causal depthwise convolution + SiLU of one sequence's rows x [n, 3C] (q|k|v) -> out [n, 3C],
// continuing from `conv_state` [K-1, 3C] (the previous K-1 inputs, oldest first; zeros at the
// start of a sequence), which is updated to the last K-1 inputs.
void KdaShortConv(const KdaDims& dims, const KdaWeights& w, const float* x, int64_t n,
                  float* conv_state, float* out);

// In place on q and k [n, H, dk]: l2-normalise each head's vector (FLA's x / sqrt(sum x^2 + 1e-6))
// and scale q by dk^-1/2.
void KdaNormalizeQk(const KdaDims& dims, float* q, float* k, int64_t n);

// Reference: out [n, H, dv] from prepared q, k [n, H, dk] (KdaNormalizeQk), v [n, H, dv],
// g [n, H, dk], beta [n, H], updating `state` [H, dk, dv] token by token. Row strides are given
// in floats (q, k, v may be slices of one q|k|v buffer).
void KdaRecurrent(const KdaDims& dims, const float* q, const float* k, const float* v,
                  int64_t qkv_stride, const float* g, const float* beta, int64_t n, float* state,
                  float* out);

// Chunked: the same for tokens at positions [first_position, first_position + n) of a sequence.
// `state` [H, dk, dv] holds the state at the start of the chunk holding first_position (chunks
// start at multiples of kKdaChunk) and `block` [kKdaChunk, H, row_values()] the rows of that
// chunk before first_position; both are updated (the state whenever a chunk completes). At
// position 0, state must be zeros; block needs no initialisation.
void KdaChunked(const KdaDims& dims, const float* q, const float* k, const float* v,
                int64_t qkv_stride, const float* g, const float* beta, int64_t n,
                int64_t first_position, float* state, float* block, float* out);

// out [rows, C] = per head RMSNorm(core) * o_norm * sigmoid(gate), all f32 (FLA's gated norm).
void KdaGatedNorm(const KdaDims& dims, const float* core, const float* gate, int64_t rows,
                  const NormWeight& o_norm, float eps, float* out);

}  // namespace latent::ops
