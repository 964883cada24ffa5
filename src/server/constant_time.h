// Secret comparison whose running time does not depend on the secret.
#pragma once

#include <cstddef>
#include <string_view>

namespace latent::server {

// Whether `given` equals `secret`. It always walks all of `given` (the part a client controls)
// and folds every byte difference and the length difference together, so how long it takes
// tells neither how much of a guess matched nor how long the secret is.
inline bool ConstantTimeEqual(std::string_view given, std::string_view secret) {
  size_t diff = given.size() ^ secret.size();
  for (size_t i = 0; i < given.size(); ++i) {
    const unsigned char s = secret.empty() ? 0 : static_cast<unsigned char>(secret[i % secret.size()]);
    diff |= static_cast<unsigned char>(given[i]) ^ s;
  }
  // A volatile read keeps the compiler from turning the loop into an early exit.
  volatile size_t result = diff;
  return result == 0;
}

}  // namespace latent::server
