#include "base/env.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "base/error.h"

namespace latent {

int64_t ParseEnvInteger(const char* name, const std::string& value, int64_t lo, int64_t hi) {
  int64_t n = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, n);
  if (ec != std::errc() || ptr != end || n < lo || n > hi) {
    Fail(name, "='", value, "': expected an integer from ", lo, " to ", hi);
  }
  return n;
}

bool ParseEnvBool(const char* name, const std::string& value) {
  std::string lower = value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "0" || lower == "false" || lower == "no" || lower == "off") return false;
  Fail(name, "='", value, "': expected 1, true, yes or on, or 0, false, no or off");
}

std::optional<int64_t> EnvInteger(const char* name, int64_t lo, int64_t hi) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return ParseEnvInteger(name, value, lo, hi);
}

std::optional<std::string> EnvChoice(const char* name,
                                     std::initializer_list<std::string_view> choices) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  std::string listed;
  for (const std::string_view choice : choices) {
    if (choice == value) return std::string(value);
    listed += StrCat(listed.empty() ? "" : ", ", choice);
  }
  Fail(name, "='", value, "': expected one of ", listed);
}

std::optional<bool> EnvBool(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return ParseEnvBool(name, value);
}

}  // namespace latent
