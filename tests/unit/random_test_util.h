// Seeded random inputs for the unit tests of ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace latent::test {

// n values from N(0, scale^2), the same for the same seed.
inline std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = scale * normal(gen);
  return v;
}

}  // namespace latent::test
