// Settings read from the environment (LATENT_THREADS, LATENT_SPIN_US, LATENT_CHECK_WEIGHTS, ...).
// A value latent cannot read is an error naming the variable, never a silent fallback to the
// default: LATENT_THREADS=abc running on every core, or LATENT_CHECK_WEIGHTS=false turning the
// scan on, would hide the typo.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace latent {

// The integer in `name`, unset (or empty) -> nullopt. Throws latent::Error when it is not a
// decimal integer in [lo, hi].
std::optional<int64_t> EnvInteger(const char* name, int64_t lo, int64_t hi);

// The boolean in `name`, unset (or empty) -> nullopt: 1, true, yes, on / 0, false, no, off (any
// case). Throws latent::Error for anything else.
std::optional<bool> EnvBool(const char* name);

// The value of `name`, unset (or empty) -> nullopt. Throws latent::Error naming the variable and
// the choices when it is none of `choices`.
std::optional<std::string> EnvChoice(const char* name,
                                     std::initializer_list<std::string_view> choices);

// The same readings of a given text (for tests and callers that hold the value).
int64_t ParseEnvInteger(const char* name, const std::string& value, int64_t lo, int64_t hi);
bool ParseEnvBool(const char* name, const std::string& value);

}  // namespace latent
