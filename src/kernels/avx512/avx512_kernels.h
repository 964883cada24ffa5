// Entry points of the AVX-512 kernels (kernels/avx512/*.cc). Only dispatch.cc calls them, and
// only after checking the CPU (see CpuHasAvx512 in kernel_table.h).
#pragma once

#include "kernels/kernel_table.h"

namespace latent::kernels::avx512 {

void FillLinearKernels(KernelTable& table);    // linear, dequant_row, transposed_linear
void FillNormKernels(KernelTable& table);      // rms_norm, layer_norm, silu_mul
void FillAttentionKernel(KernelTable& table);  // attention

}  // namespace latent::kernels::avx512
