#include "ops/norm.h"

#include "kernels/kernel_table.h"
#include "threads/thread_pool.h"

namespace latent::ops {

void RmsNorm(const float* x, int64_t rows, int64_t d, const NormWeight& w, float eps, float* out) {
  const auto& k = kernels::BestKernels();
  threads::ParallelRows(rows, d, [&](int64_t r0, int64_t r1) {
    k.rms_norm(x + r0 * d, r1 - r0, d, w.data, w.dtype, eps, out + r0 * d);
  });
}

}  // namespace latent::ops
