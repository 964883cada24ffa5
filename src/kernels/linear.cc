#include "kernels/linear.h"

#include <vector>

#include "kernels/kernel_table.h"

namespace latent::kernels {

void Linear(const float* x, int64_t m, const WeightRef& w, float* y) {
  thread_local std::vector<float> scratch;  // the reference kernel's k floats
  if (static_cast<int64_t>(scratch.size()) < w.k) scratch.resize(w.k);
  BestKernels().linear(x, m, w, y, scratch.data());
}

}  // namespace latent::kernels
