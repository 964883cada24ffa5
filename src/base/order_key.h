// A ranking of (value, id) pairs as one integer, for top-k selections that must not depend on
// how they are computed: the sampler's top-k (engine/filtered_draw.h) and the DSA indexer's
// (ops/dsa_indexer.cc).
#pragma once

#include <bit>
#include <cstdint>

namespace latent {

// Smaller first: the larger value first, equal values by the smaller id, so two pairs are never
// tied and a top-k keeps exactly k. -0 and +0 are one value (as floats compare); -inf comes after
// every finite value; a NaN with the sign bit clear before +inf, one with it set after -inf.
inline uint64_t OrderKey(float value, int32_t id) {
  uint32_t bits = std::bit_cast<uint32_t>(value + 0.0f);  // -0 + 0 = +0: one zero
  bits = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;  // ascending with the value
  return (static_cast<uint64_t>(~bits) << 32) | static_cast<uint32_t>(id);
}

}  // namespace latent
