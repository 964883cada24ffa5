// The attention output gate: each head's attention output (after the value up-projection, before
// o_proj) times sigmoid(gate), per channel (A.X-K2, Hy4: `width` = v_head_dim) or with one scalar
// per head (dots3-note, Ling: `width` = 1). Applied to the per-head outputs, it holds for either
// MLA form: the absorbed form applies it after projecting the latent outputs back through W_UV.
#pragma once

#include <cstdint>

namespace latent::ops {

struct OutputGateDims {
  int64_t heads = 0;  // H
  int64_t v = 0;      // dv: values per head of the attention output
  int64_t width = 0;  // gate logits per head: dv (per channel) or 1 (per head)
};

// attn [T, H, dv] *= sigmoid(gate [T, H, width]), broadcast over a head's dv values when width 1.
void ApplyOutputGate(const OutputGateDims& dims, const float* gate, int64_t tokens, float* attn);

}  // namespace latent::ops
