// Entry points of the AMX kernels (kernels/amx/*.cc). Only dispatch.cc (and the kernel tests,
// through the table) call them, and only after checking the CPU (CpuHasAmxBf16 in
// base/cpu_features.h).
#pragma once

#include <cstdint>

#include "kernels/kernel_table.h"

namespace latent::kernels::amx {

// Wraps table.linear (filled before, the AVX-512 one): bf16 weights with bf16_activations that
// carry a packed copy go to the TDPBF16PS kernel (linear_amx.cc), the others to the kernel it
// wrapped; sets table.packed_bytes and table.pack (PackedBytesAmx, PackAmx).
void FillAmxLinear(KernelTable& table);
// Bytes of w's AMX tile layout (linear_amx.cc): ceil(n / 16) * ceil(k / 32) KiB for bf16 weights
// with bf16_activations, else 0 (read as stored).
int64_t PackedBytesAmx(const WeightRef& w);
// Writes w (rows as stored at w.data) in that layout to `out` (PackedBytesAmx(w) bytes).
void PackAmx(const WeightRef& w, void* out);

}  // namespace latent::kernels::amx
