// How big a JSON schema is for XGrammar, counted before it is compiled: XGrammar's compile time
// grows faster than the schema (docs/architecture.md has the figures), and a compile cannot be
// interrupted, so a schema past the limits is refused at once instead.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string_view>

namespace latent::structured {

// The most values one JSON schema may hold (response_format, structured_outputs.json, a forced
// tool call's schema): 4,000 required properties (12k values) compiled in 0.8 s here, 4,000 of
// them through "$ref"s (20k values) in 4.5 s.
inline constexpr size_t kMaxJsonSchemaValues = 10000;
// The most optional properties (not in their object's "required") one schema may hold: their
// cost grows about as the cube of their number, across objects too (1,000 in one object compiled
// in 0.9 s, 1,500 in 3.3 s, 2,000 in 8.4 s; ten objects of 400 in 6 s).
inline constexpr size_t kMaxJsonSchemaOptionalProperties = 1000;

struct JsonSchemaSize {
  size_t values = 0;               // Every JSON value in the schema, at any depth.
  size_t optional_properties = 0;  // Properties their object does not list in "required".

  JsonSchemaSize& operator+=(const JsonSchemaSize& other) {
    values += other.values;
    optional_properties += other.optional_properties;
    return *this;
  }
};

// `schema`'s size; linear in it. Optional properties are those of the subschemas where XGrammar
// reads them (under properties, items, anyOf, $defs, ...).
JsonSchemaSize MeasureJsonSchema(const nlohmann::ordered_json& schema);

// Throws latent::Error ("too many values in the JSON schema: 25003 at any depth (...), more than
// the 10000 allowed") when `size` has more values or optional properties than allowed; `what`
// names the schemas ("the JSON schema", "the structural tag's schemas").
void CheckJsonSchemaSize(const JsonSchemaSize& size, std::string_view what, size_t max_values,
                         size_t max_optional_properties);

}  // namespace latent::structured
