// Sums of request-supplied counts (a prompt's length plus a client's max_tokens, which may be
// anything up to INT64_MAX) for comparison with a limit: a wrapped sum would pass every check.
#pragma once

#include <cstdint>
#include <limits>

namespace latent {

// a + b, clamped to int64_t's range instead of wrapping.
inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

}  // namespace latent
