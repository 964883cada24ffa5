// Sums of request-supplied counts (a prompt's length plus a client's max_tokens, which may be
// anything up to INT64_MAX) and products of config sizes, for comparison with a limit: a wrapped
// result would pass every check.
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

// a * b, clamped likewise: for products of config sizes that are then compared with a bound.
inline int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (!__builtin_mul_overflow(a, b, &product)) return product;
  return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min()
                            : std::numeric_limits<int64_t>::max();
}

}  // namespace latent
