#include "structured/json_schema_check.h"

#include <array>
#include <string>
#include <string_view>

#include "base/error.h"

namespace latent::structured {
namespace {

// What XGrammar 0.2.9's converter skips (json_schema_converter.cc: WarnUnsupportedKeywords and
// its "ignoring" warnings).
constexpr std::array<std::string_view, 10> kUnsupported = {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
    "uniqueItems", "contains", "minContains", "maxContains"};

// Keywords whose value is one subschema / an array of them / an object of them.
constexpr std::array<std::string_view, 8> kSchemaValued = {
    "items", "additionalProperties", "propertyNames", "unevaluatedProperties",
    "unevaluatedItems", "additionalItems", "contentSchema", "not"};
constexpr std::array<std::string_view, 4> kSchemaArrays = {"anyOf", "oneOf", "allOf", "prefixItems"};
constexpr std::array<std::string_view, 5> kSchemaMaps = {"properties", "patternProperties", "$defs",
                                                         "definitions", "dependentSchemas"};

template <size_t N>
bool In(const std::array<std::string_view, N>& names, std::string_view key) {
  for (std::string_view n : names) {
    if (n == key) return true;
  }
  return false;
}

// JSON Pointer escaping of one path segment.
std::string Escape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

void Check(const nlohmann::ordered_json& schema, const std::string& at) {
  if (schema.is_boolean()) return;
  if (!schema.is_object()) Fail("the JSON schema at ", at, " must be an object or a boolean");
  const bool is_number = schema.contains("type") && schema["type"] == "number";
  for (const auto& [key, value] : schema.items()) {
    const std::string here = at + "/" + Escape(key);
    if (In(kUnsupported, key)) Fail("unsupported JSON schema keyword '", key, "' at ", at);
    if (key == "multipleOf" && is_number) {
      Fail("unsupported JSON schema keyword 'multipleOf' for type number at ", at, " (integers only)");
    }
    if ((key == "minLength" || key == "maxLength") && (schema.contains("pattern") || schema.contains("format"))) {
      Fail("unsupported JSON schema keyword '", key, "' together with 'pattern' or 'format' at ", at);
    }
    if (In(kSchemaValued, key)) {
      if (key == "items" && value.is_array()) {
        for (size_t i = 0; i < value.size(); ++i) Check(value[i], here + "/" + std::to_string(i));
      } else {
        Check(value, here);
      }
    } else if (In(kSchemaArrays, key)) {
      if (!value.is_array()) Fail("the JSON schema keyword '", key, "' at ", at, " must be an array");
      for (size_t i = 0; i < value.size(); ++i) Check(value[i], here + "/" + std::to_string(i));
    } else if (In(kSchemaMaps, key)) {
      if (!value.is_object()) Fail("the JSON schema keyword '", key, "' at ", at, " must be an object");
      for (const auto& [name, sub] : value.items()) Check(sub, here + "/" + Escape(name));
    }
  }
}

}  // namespace

void CheckJsonSchemaSupported(const nlohmann::ordered_json& schema) {
  if (!schema.is_object()) Fail("the JSON schema must be an object");
  Check(schema, "#");
}

}  // namespace latent::structured
