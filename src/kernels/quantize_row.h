// Symmetric per-row int8 quantization: the one rounding rule `--quantize int8` applies to weight
// rows at load and `--quantize w8a8` also applies to activation rows (per token) at run time.
#pragma once

#include <cstdint>

namespace latent::kernels {

// Quantizes one f32 row: scale = max |w| / 127 (f32), q[c] = round-to-nearest-even(w[c] / scale)
// (an f32 division) clamped to [-127, 127]; an all-zero row gets scale 0 and q = 0. NaN elements
// are ignored by the max and become 0. Returns the scale. The AVX-512 W8A8 kernel's activation
// quantizer (avx512/linear_w8a8_vnni.cc) computes the same bits.
float QuantizeRowInt8(const float* w, int64_t k, int8_t* q);

// sum over c of q[c]: the W8A8 kernels' offset term for u8 activations (kernels/weight_ref.h).
int32_t SumRowInt8(const int8_t* q, int64_t k);

}  // namespace latent::kernels
