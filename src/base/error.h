// Errors with context. latent reports bad input (checkpoints, configs, requests) by throwing
// latent::Error whose message names the file, the item and what is wrong; the CLI and the server
// catch it at their boundary, so a bad input never takes the process down.
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

}  // namespace latent

// Internal invariant; a failure is a bug in latent, not bad input.
#define LATENT_CHECK(cond)                                                                 \
  do {                                                                                     \
    if (!(cond)) ::latent::Fail(__FILE__, ":", __LINE__, ": check failed: " #cond);        \
  } while (0)
