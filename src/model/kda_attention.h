// A KDA linear-attention layer over a packed batch (ops/kda.h): the q|k|v projections, the short
// convolution, the forget gate and beta, the chunked delta rule, the gated output norm and
// o_proj. Each sequence's state lives in its state slot (ForwardBatch::StateSlot) as the layer's
// kda.conv / kda.state / kda.block rows (KdaStateRows); a sequence whose tokens start at position
// 0 starts from zeros, so a recomputed (preempted) sequence rebuilds its state from scratch.
#pragma once

#include <cstdint>

#include "model/model.h"
#include "ops/kda.h"

namespace latent::model {

// The forget gate form of a family (kimi_linear's; bailing_hybrid and glm5_next add theirs).
//  kGlm5Next: bounded, dims.gate_lower_bound * sigmoid(...) over the low-rank f_b(f_a(x)).
//  kFullRank: bailing_hybrid's full-rank forget and output gates (KdaWeights::forget_full, g_full;
//  safe or Kimi's form as forget_full says).
enum class KdaForgetGateKind : uint8_t { kKimi, kGlm5Next, kFullRank };

// x [T, D] (after input_layernorm) -> out [T, D], for layer `layer` whose state rows are the
// first three of its CacheRows (kda.conv, kda.state, kda.block). `norm_eps`: the gated output
// norm's epsilon.
void KdaAttentionForward(const ops::KdaDims& dims, const ops::KdaWeights& w, KdaForgetGateKind gate,
                         float norm_eps, int64_t layer, const ForwardBatch& batch, const float* x,
                         int64_t hidden, float* out);

}  // namespace latent::model
