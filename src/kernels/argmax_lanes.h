// The last step of the vector argmax kernels (avx512/norm_avx512.cc, avx2/norm_avx2.cc). Plain
// scalar code: include it before a target region, so every ISA's kernel shares one definition.
#pragma once

#include <cstdint>

namespace latent::kernels {

// KernelTable::argmax's answer from `lanes` (best value, its index) pairs, where each lane
// started at x[0] with index 0 and scanned its own values in increasing index order keeping the
// first largest (a strict <): the largest best, the smallest index among equal ones. A NaN only
// stands where x[0] is one, and then in every lane at index 0, which this returns.
inline int64_t CombineArgmaxLanes(const float* best, const int32_t* at, int lanes) {
  float value = best[0];
  int32_t index = at[0];
  for (int l = 1; l < lanes; ++l) {
    if (value < best[l] || (!(best[l] < value) && at[l] < index)) {
      value = best[l];
      index = at[l];
    }
  }
  return index;
}

}  // namespace latent::kernels
