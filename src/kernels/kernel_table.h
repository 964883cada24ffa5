// The kernels latent runs, as one table of function pointers filled once at start from the
// CPU's features. ref/ holds the plain scalar versions: the oracle every faster kernel is tested
// against. Kernels are pure functions on raw pointers and never allocate; callers pass scratch.
#pragma once

#include <cstdint>

#include "kernels/weight_ref.h"

namespace latent::kernels {

struct KernelTable {
  // y[m, n] = x[m, k] . W[n, k]^T, accumulating in f32. scratch: k floats.
  void (*linear)(const float* x, int64_t m, const WeightRef& w, float* y, float* scratch);
  // out[k] = row `row` of W, dequantized to f32.
  void (*dequant_row)(const WeightRef& w, int64_t row, float* out);
  // y[m, d] = x * rsqrt(mean(x^2) + eps) * weight[d]; weight f32/bf16/f16. In place allowed.
  void (*rms_norm)(const float* x, int64_t m, int64_t d, const void* weight, DType weight_dtype,
                   float eps, float* y);
  // y[m, d] = (x - mean) / sqrt(var + eps) * weight[d] + bias[d] (biased variance, as
  // torch.nn.LayerNorm); weight/bias f32/bf16/f16. In place allowed.
  void (*layer_norm)(const float* x, int64_t m, int64_t d, const void* weight, const void* bias,
                     DType dtype, float eps, float* y);
  // out[i] = silu(gate[i]) * up[i]
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out);
};

// The scalar reference kernels.
const KernelTable& RefKernels();
// The best kernels this CPU supports (today: the reference ones).
const KernelTable& BestKernels();

}  // namespace latent::kernels
