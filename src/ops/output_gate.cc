#include "ops/output_gate.h"

#include <cmath>

#include "base/error.h"

namespace latent::ops {

void ApplyOutputGate(const OutputGateDims& d, const float* gate, int64_t tokens, float* attn) {
  LATENT_CHECK(d.width == d.v || d.width == 1);
  for (int64_t i = 0; i < tokens * d.heads; ++i) {  // one (token, head) at a time
    const float* g = gate + i * d.width;
    float* out = attn + i * d.v;
    for (int64_t c = 0; c < d.v; ++c) {
      out[c] *= 1.0f / (1.0f + std::exp(-g[d.width == 1 ? 0 : c]));
    }
  }
}

}  // namespace latent::ops
