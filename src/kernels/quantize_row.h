// Symmetric per-row int8 quantization: the one rounding rule `--quantize int8` applies to weight
// rows at load and `--quantize w8a8` also applies to activation rows (per token) at run time.
#pragma once

#include <cstdint>

namespace latent::kernels {

// Quantizes one f32 row: scale = max |w| / 127 (f32), q[c] = round-to-nearest-even(w[c] / scale)
// (an f32 division) clamped to [-127, 127]; an all-zero row gets scale 0 and q = 0. A row holding
// a NaN gets q = 0 and a NaN scale, so every output it reaches is NaN, as in the bf16 and f32
// paths (the sampler then fails the request instead of drawing from finite garbage); +inf gives
// an infinite scale, and NaN outputs the same way. Returns the scale. The AVX2 and AVX-512 W8A8
// kernels' activation quantizers compute the same bits.
float QuantizeRowInt8(const float* w, int64_t k, int8_t* q);

// sum over c of q[c]: the W8A8 kernels' offset term for u8 activations (kernels/weight_ref.h).
int32_t SumRowInt8(const int8_t* q, int64_t k);

}  // namespace latent::kernels
