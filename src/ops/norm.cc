#include "ops/norm.h"

#include "kernels/kernel_table.h"

namespace latent::ops {

void RmsNorm(const float* x, int64_t rows, int64_t d, const NormWeight& w, float eps, float* out) {
  kernels::BestKernels().rms_norm(x, rows, d, w.data, w.dtype, eps, out);
}

}  // namespace latent::ops
