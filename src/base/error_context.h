// Adding context to a caught latent::Error without changing its kind (base/error.h): a boundary
// that names the file or directory an error came from must not turn a bug into bad input.
#pragma once

#include "base/error.h"

namespace latent {

// Throws what `caught` is, InternalError (a bug) or a plain Error (bad input), again with the
// concatenated message. Fail(e.what(), ...) made a failed LATENT_CHECK bad input: exit 2, or a
// 400 from the server.
template <typename... Args>
[[noreturn]] void FailLike(const Error& caught, const Args&... args) {
  if (dynamic_cast<const InternalError*>(&caught) != nullptr) throw InternalError(StrCat(args...));
  throw Error(StrCat(args...));
}

}  // namespace latent
