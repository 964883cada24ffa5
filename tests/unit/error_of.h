// The message of the latent::Error a callable throws, for tests that check error wording.
#pragma once

#include <string>

#include "base/error.h"

namespace latent::test {

// The message of the latent::Error `fn` throws ("" if none).
template <typename Fn>
std::string ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace latent::test
