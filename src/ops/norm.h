// Norm weights as stored (any dtype the kernels read), and the norms the families use.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace latent::ops {

struct NormWeight {
  const void* data = nullptr;  // [d]
  DType dtype = DType::kF32;
};

// RMSNorm of rows x [rows, d] -> out [rows, d] (in place allowed).
void RmsNorm(const float* x, int64_t rows, int64_t d, const NormWeight& w, float eps, float* out);

}  // namespace latent::ops
