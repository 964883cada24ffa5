// WeightRef: a raw view of one weight matrix [n, k] as stored in the checkpoint (f32, bf16, f16
// or fp8 e4m3 with block scales). Kernels convert inside, so weights are never copied at load.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace latent::kernels {

struct WeightRef {
  const void* data = nullptr;  // [n, k] row-major, possibly unaligned (mapped file).
  DType dtype = DType::kF32;
  int64_t n = 0;  // Output features (rows).
  int64_t k = 0;  // Input features (columns).
  // FP8 only: scales [ceil(n / block_n), ceil(k / block_k)], W[r, c] = q[r, c] * s[r / bn, c / bk].
  const void* scale = nullptr;
  DType scale_dtype = DType::kF32;
  int64_t block_n = 0;
  int64_t block_k = 0;
  // FP8 only: the row of the full matrix (the one `scale` covers) that row 0 of this view is.
  int64_t scale_row0 = 0;

  // The sub-matrix of rows [row, row + rows): shares data and scales; any row, also mid-block.
  WeightRef Rows(int64_t row, int64_t rows) const;
};

}  // namespace latent::kernels
