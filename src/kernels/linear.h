// y[m, n] = x[m, k] . W[n, k]^T through BestKernels(), with the reference kernel's scratch held
// per thread: what the model's layers call.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/weight_ref.h"

namespace latent::kernels {

struct KernelTable;

void Linear(const float* x, int64_t m, const WeightRef& w, float* y);

// The packed copy of `w` that `table`'s linear reads (KernelTable::pack), in a new 64-byte-aligned
// buffer, with w.packed pointing at it; null (w unchanged) when the table reads w as stored. The
// caller keeps the buffer as long as w is used, and w.data as long as something reads the rows
// as stored (dequant_row, transposed_linear; WeightRef::packed says which). `bytes` (optional)
// gets its size.
std::unique_ptr<uint8_t[]> PackForLinear(const KernelTable& table, WeightRef& w,
                                         int64_t* bytes = nullptr);

}  // namespace latent::kernels
