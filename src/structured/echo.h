// A caller's value quoted in an error, cut short: a schema can be megabytes, and the error goes
// back to the client and into logs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace latent::structured {

// `text` cut to its first 200 bytes (never inside a UTF-8 character) with "..." when longer.
std::string Truncated(std::string text);

// `value` as compact JSON, truncated as above (invalid UTF-8 replaced).
std::string Echo(const nlohmann::ordered_json& value);

}  // namespace latent::structured
