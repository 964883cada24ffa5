// Where a JSON schema holds its subschemas: the keywords whose value is one subschema, an array of
// them or an object of them. Shared by the walks over a schema (json_schema_check,
// json_schema_size).
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace latent::structured {

// Keywords whose value is one subschema / an array of them / an object of them.
inline constexpr std::array<std::string_view, 8> kSchemaValued = {
    "items", "additionalProperties", "propertyNames", "unevaluatedProperties",
    "unevaluatedItems", "additionalItems", "contentSchema", "not"};
inline constexpr std::array<std::string_view, 4> kSchemaArrays = {"anyOf", "oneOf", "allOf",
                                                                  "prefixItems"};
inline constexpr std::array<std::string_view, 5> kSchemaMaps = {
    "properties", "patternProperties", "$defs", "definitions", "dependentSchemas"};

template <size_t N>
bool In(const std::array<std::string_view, N>& names, std::string_view key) {
  for (std::string_view n : names) {
    if (n == key) return true;
  }
  return false;
}

}  // namespace latent::structured
