// Errors with context. latent reports bad input (checkpoints, configs, requests) by throwing
// latent::Error whose message names the file, the item and what is wrong; the CLI and the server
// catch it at their boundary, so a bad input never takes the process down. A broken internal
// invariant (LATENT_CHECK, FailInternal) throws latent::InternalError instead: a bug in latent.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace latent {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A bug in latent, not bad input. It is a latent::Error, so every boundary that keeps a process
// going past bad input (the engine failing a step's requests, the server answering one request
// with an error) keeps it going past this too. Where the two must differ, it is caught first:
// the CLI exits 1 with "latent: internal error:" instead of 2, and under MPI a rank whose forward
// fails a check ends the job at once, since the other ranks did not fail with it
// (docs/reliability.md, docs/scale-out.md).
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error(message) {}
};

namespace internal {
inline void AppendAll(std::ostringstream&) {}
template <typename T, typename... Rest>
void AppendAll(std::ostringstream& out, const T& first, const Rest&... rest) {
  out << first;
  AppendAll(out, rest...);
}
}  // namespace internal

// Concatenates the streamable arguments into one string.
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  internal::AppendAll(out, args...);
  return out.str();
}

// Throws latent::Error with the concatenated message.
template <typename... Args>
[[noreturn]] void Fail(const Args&... args) {
  throw Error(StrCat(args...));
}

// Throws latent::InternalError with the concatenated message: for an invariant of latent's own
// that does not hold, never for something the input got wrong.
template <typename... Args>
[[noreturn]] void FailInternal(const Args&... args) {
  throw InternalError(StrCat(args...));
}

}  // namespace latent

// Internal invariant; a failure is a bug in latent, not bad input: it throws InternalError.
#define LATENT_CHECK(cond)                                                                  \
  do {                                                                                      \
    if (!(cond)) ::latent::FailInternal(__FILE__, ":", __LINE__, ": check failed: " #cond); \
  } while (0)
