// The scalar W8A8 linear (`--quantize w8a8`, kernels/weight_ref.h's row_sums): the oracle of the
// VNNI kernel, and what every CPU without AVX512-VNNI runs.
#pragma once

#include <cstdint>

#include "kernels/weight_ref.h"

namespace latent::kernels {

// Whether `w` selects the W8A8 linear: I8 with per-row f32 scales and row sums.
bool IsW8A8(const WeightRef& w);

// y[m, n] = float(xq[m, :] . q[n, :]) * (sx[m] * s[n]), xq and sx from QuantizeRowInt8 of each row
// of x [m, k]; the integer dot summed exactly in int32. Needs IsW8A8(w).
void LinearW8A8Ref(const float* x, int64_t m, const WeightRef& w, float* y);

}  // namespace latent::kernels
