// NaN and infinity in checkpoint tensors. A weight that is not finite makes every logit it
// touches NaN: the server would answer with garbage (or one token forever) instead of failing, so
// Checkpoint::Open scans the floating-point tensors (ShouldCheckWeights says when) and refuses
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

class Checkpoint;

// Checkpoint::Open scans checkpoints of up to kAutoCheckBytes of floating-point data (a fraction
// of a second at memory bandwidth) and skips larger ones, whose full read would add minutes to
// start-up; the environment variable LATENT_CHECK_WEIGHTS=1 (or 0) forces the scan on (or off).
inline constexpr uint64_t kAutoCheckBytes = uint64_t{4} << 30;
bool ShouldCheckWeights(const Checkpoint& ckpt);

// Throws latent::Error naming the shard, the tensor, the first bad element and the count when a
// floating-point tensor of `ckpt` holds NaN or infinity.
void CheckFinite(const Checkpoint& ckpt);

}  // namespace latent::weights
