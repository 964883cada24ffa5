// NaN and infinity in checkpoint tensors. A weight that is not finite makes every logit it
// touches NaN: the server would answer with garbage (or one token forever) instead of failing, so
// latent scans the floating-point tensors at load (Checkpoint::Open, see WeightCheck) and refuses
// such a checkpoint with the file, the tensor and the first bad element.
#pragma once

#include <cstdint>
#include <optional>

#include "tensor/tensor_view.h"

namespace latent::weights {

struct NonFinite {
  int64_t first_index = 0;  // flat (row-major) index of the first NaN or infinity
  int64_t count = 0;        // how many elements are NaN or infinite in all
  bool first_is_nan = false;
};

// Scans f32, f16, bf16, fp8 e4m3 (NaN only: the format has no infinity) and e8m0 scales (0xff is
// NaN); integer and bool tensors have nothing to find. Reads every byte once, branch-free in
// blocks, so it runs near memory bandwidth (bench: ~10 GB/s per thread on warm pages).
std::optional<NonFinite> FindNonFinite(const TensorView& tensor);

}  // namespace latent::weights
