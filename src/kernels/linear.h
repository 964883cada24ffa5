// y[m, n] = x[m, k] . W[n, k]^T through BestKernels(), with the reference kernel's scratch held
// per thread: what the model's layers call.
#pragma once

#include <cstdint>

#include "kernels/weight_ref.h"

namespace latent::kernels {

void Linear(const float* x, int64_t m, const WeightRef& w, float* y);

}  // namespace latent::kernels
