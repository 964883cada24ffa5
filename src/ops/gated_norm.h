// Gated RMSNorm (A.X-K2's input and post-attention norms; Megatron's GatedNormWrapper): an RMSNorm
// whose output is scaled per channel by a low-rank, input-dependent sigmoid gate,
//   y = RMSNorm(x);  out = y * sigmoid(up(silu(down(y)))).
#pragma once

#include <cstdint>

#include "kernels/weight_ref.h"
#include "ops/norm.h"

namespace latent::ops {

// The gate's bottleneck MLP (no biases): down [r, d] (transformers' fc1, the hub's W_down) and
// up [d, r] (fc2, W_up); r is the gate's rank (gated_norm_rank, 16 for A.X-K2).
struct NormGateWeights {
  kernels::WeightRef down, up;
};

// x [rows, d] -> out [rows, d] (in place allowed): RMSNorm with weight `norm` and `eps`, then times
// the gate computed from the normed rows. The gate is computed in f32, as transformers does.
void GatedRmsNorm(const float* x, int64_t rows, int64_t d, const NormWeight& norm,
                  const NormGateWeights& gate, float eps, float* out);

}  // namespace latent::ops
