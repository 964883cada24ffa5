#include "ops/gated_norm.h"

#include <cmath>
#include <vector>

#include "kernels/linear.h"

namespace latent::ops {

void GatedRmsNorm(const float* x, int64_t rows, int64_t d, const NormWeight& norm,
                  const NormGateWeights& gate, float eps, float* out) {
  const int64_t rank = gate.down.n;
  RmsNorm(x, rows, d, norm, eps, out);
  std::vector<float> hidden(rows * rank);  // [rows, r]
  kernels::Linear(out, rows, gate.down, hidden.data());
  for (float& v : hidden) v = v / (1.0f + std::exp(-v));  // SiLU
  std::vector<float> logits(rows * d);  // [rows, d]
  kernels::Linear(hidden.data(), rows, gate.up, logits.data());
  for (int64_t i = 0; i < rows * d; ++i) out[i] *= 1.0f / (1.0f + std::exp(-logits[i]));
}

}  // namespace latent::ops
