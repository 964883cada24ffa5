// What the CLI prints and exits with for the exception that ended a command (src/cli/main.cc,
// docs/reliability.md): 2 for bad input (latent::Error), 1 for a bug in latent (InternalError, a
// failed LATENT_CHECK) or anything else that escaped (std::bad_alloc, a library's own error).
#pragma once

#include <exception>
#include <string>

#include "base/error.h"

namespace latent {

struct ExitOutcome {
  int code = 1;
  std::string error;  // printed after "latent: ": "error: ..." or "internal error: ..."
};

// `thrown` must hold an exception. InternalError is a latent::Error (so the boundaries that
// survive bad input survive it too) and is therefore tested first.
inline ExitOutcome ExitOutcomeOf(std::exception_ptr thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const InternalError& e) {
    return {1, StrCat("internal error: ", e.what())};
  } catch (const Error& e) {
    return {2, StrCat("error: ", e.what())};
  } catch (const std::exception& e) {
    return {1, StrCat("internal error: ", e.what())};
  } catch (...) {
    return {1, "internal error: an unknown exception"};
  }
}

}  // namespace latent
