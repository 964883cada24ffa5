// CLI11 checks for the commands' numeric flags, with messages that say what a flag accepts:
// CLI11's own PositiveNumber lets nan and 1e300 through, and Range prints "Value 0 not in range
// 0.000000 to 1797...". Each check reads the text before CLI11 converts it, so a value too large
// for the option's type is named as such, not as CLI11's "At Most 1 required but received 2".
// The bound variable's type picks the limits: Positive(opt.max_seqs).
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <system_error>
#include <type_traits>

namespace latent::cli {

namespace internal {

inline std::string NumberText(long double v) {
  std::ostringstream out;
  if (v == std::floor(v) && std::fabs(v) < 1e20L) {
    out << std::fixed << std::setprecision(0) << v;  // integers in full: 9223372036854775807
  } else {
    out << std::setprecision(std::numeric_limits<double>::digits10) << v;
  }
  return out.str();
}

// A check that the text is a finite number in [lo, hi] (lo excluded where `open_low`), and an
// integer where T is one.
// The integer in `text` as a long double, or the message saying why it is not one. Digits only
// (an optional '-'): CLI11 converts integers so, and would refuse 1e3 or 5.0 after a check that
// read them as numbers, with its own "Could not convert".
inline std::string ReadInteger(const std::string& text, long double hi, long double* value) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  long long n = 0;
  std::from_chars_result read = std::from_chars(begin, end, n);
  *value = static_cast<long double>(n);
  if (read.ec == std::errc::result_out_of_range && !text.starts_with("-")) {
    unsigned long long u = 0;
    read = std::from_chars(begin, end, u);
    *value = static_cast<long double>(u);
  }
  if (read.ec == std::errc::result_out_of_range) {
    if (text.starts_with("-")) return "'" + text + "' is below every value allowed";
    return "must be at most " + NumberText(hi) + ", got " + text;
  }
  if (read.ec != std::errc() || read.ptr != end) return "'" + text + "' is not an integer";
  return "";
}

template <typename T>
CLI::Validator NumberCheck(long double lo, long double hi, bool open_low, std::string what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        if constexpr (std::is_integral_v<T>) {
          long double v = 0;
          if (std::string error = ReadInteger(text, hi, &v); !error.empty()) return error;
          if (v < lo || (open_low && v == lo)) return "must be " + what + ", got " + text;
          if (v > hi) return "must be at most " + NumberText(hi) + ", got " + text;
          return "";
        }
        const char* begin = text.c_str();
        char* end = nullptr;
        errno = 0;
        const long double v = std::strtold(begin, &end);
        if (end == begin || *end != '\0') return "'" + text + "' is not a number";
        if (!std::isfinite(v) || (errno == ERANGE && v != 0)) {
          return "must be a finite number at most " + NumberText(hi) + ", got " + text;
        }
        if (v < lo || (open_low && v == lo)) return "must be " + what + ", got " + text;
        if (v > hi) return "must be at most " + NumberText(hi) + ", got " + text;
        return "";
      },
      what);
}

}  // namespace internal

// > 0, at most `hi` (default: the type's largest value).
template <typename T>
CLI::Validator Positive(const T&, long double hi = std::numeric_limits<T>::max()) {
  return internal::NumberCheck<T>(0, hi, /*open_low=*/true,
                                  std::is_integral_v<T> ? "a positive integer" : "positive");
}

// >= 0, at most `hi` (default: the type's largest value).
template <typename T>
CLI::Validator NonNegative(const T&, long double hi = std::numeric_limits<T>::max()) {
  return internal::NumberCheck<T>(0, hi, /*open_low=*/false,
                                  std::is_integral_v<T> ? "a non-negative integer"
                                                        : "zero or positive");
}

// In [lo, hi].
template <typename T>
CLI::Validator Between(const T&, long double lo, long double hi) {
  return internal::NumberCheck<T>(lo, hi, /*open_low=*/false,
                                  "at least " + internal::NumberText(lo));
}

}  // namespace latent::cli
