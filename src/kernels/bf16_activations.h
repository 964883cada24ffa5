// bf16 compute (WeightRef::bf16_activations, `--precision bf16`): the activations a linear reads
// are rounded to bf16 once per call, into a buffer, before the kernel runs; the products and the
// f32 accumulation are then the kernel's usual ones. Every kernel family rounds exactly as
// F32ToBF16 does (round to nearest even, NaN stays NaN), so all of them compute the same
// y = bf16(x) . W^T, each in its own fixed summation order.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/weight_ref.h"
#include "tensor/dtype.h"

namespace latent::kernels {

// Whether a linear over `w` rounds its inputs (int8 weights define their own activations).
inline bool RoundsActivations(const WeightRef& w) {
  return w.bf16_activations && w.dtype != DType::kI8;
}

// out[i] = RoundToBF16(x[i]) for i < count, scalar (the reference's; in place allowed).
inline void RoundToBf16Scalar(const float* x, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = RoundToBF16(x[i]);
}

using RoundRowsFn = void (*)(const float* x, int64_t count, float* out);

// x itself when `w` keeps f32 activations; else x's `count` values rounded by `round` into
// `buffer` (grown as needed; the caller's thread_local, so the returned pointer stays valid
// until that thread's next call).
inline const float* Bf16Input(const float* x, int64_t count, const WeightRef& w,
                              std::vector<float>& buffer, RoundRowsFn round) {
  if (!RoundsActivations(w) || count <= 0) return x;
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(count);
  round(x, count, buffer.data());
  return buffer.data();
}

// `w` without the flag: what a kernel hands on once it has rounded the inputs itself.
inline WeightRef WithoutBf16Flag(WeightRef w) {
  w.bf16_activations = false;
  return w;
}

}  // namespace latent::kernels
