#include "structured/json_schema_check.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"
#include "structured/json_schema_keywords.h"

namespace latent::structured {
namespace {

// What XGrammar 0.2.9's converter skips (json_schema_converter.cc: WarnUnsupportedKeywords and
// its "ignoring" warnings).
constexpr std::array<std::string_view, 10> kUnsupported = {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
    "uniqueItems", "contains", "minContains", "maxContains"};

// XGrammar takes the first of these an object has and ignores every other constraining keyword
// of the object (GenerateFromSpec's order).
constexpr std::array<std::string_view, 6> kExclusive = {"$ref",  "const", "enum",
                                                        "anyOf", "oneOf", "allOf"};
// The keywords that constrain a value (not annotations such as title, description, default or
// $defs).
constexpr std::array<std::string_view, 30> kConstraining = {
    "type",          "properties",       "required",        "additionalProperties",
    "patternProperties", "propertyNames", "minProperties",  "maxProperties",
    "items",         "prefixItems",      "additionalItems", "unevaluatedItems",
    "unevaluatedProperties", "minItems", "maxItems",        "minimum",
    "maximum",       "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength",     "maxLength",        "pattern",         "format",
    "const",         "enum",             "anyOf",           "oneOf",
    "allOf",         "$ref"};

// Keywords that constrain one type of value only, and what tells XGrammar a value's type: without
// the latter it compiles the former's object as any value.
constexpr std::array<std::string_view, 15> kTypeSpecific = {
    "minimum",   "maximum",       "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength",     "pattern",          "format",           "minItems",
    "maxItems",  "required",      "minProperties",    "maxProperties",    "patternProperties"};
constexpr std::array<std::string_view, 13> kTyping = {
    "type",  "properties", "additionalProperties", "unevaluatedProperties", "items",
    "prefixItems", "unevaluatedItems", "$ref", "const", "enum", "anyOf", "oneOf", "allOf"};

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

// Whether `type` (a name or a list of them) names `name`.
bool HasType(const nlohmann::ordered_json& schema, std::string_view name) {
  if (!schema.contains("type")) return false;
  const auto& type = schema["type"];
  if (type.is_string()) return type.get<std::string>() == name;
  if (!type.is_array()) return false;
  for (const auto& t : type) {
    if (t.is_string() && t.get<std::string>() == name) return true;
  }
  return false;
}

// An integer's multipleOf, which XGrammar keeps only as a whole number up to 1,024 on a range
// bounded on both sides (or on neither) of at most 10,000 values; it ignores it otherwise. The
// range as XGrammar folds it (ComputeEffectiveIntegerRange): the tighter of each side's inclusive
// and exclusive bound.
void CheckIntegerMultipleOf(const nlohmann::ordered_json& schema, const std::string& at) {
  const auto& m = schema["multipleOf"];
  const auto refuse = [&](const char* why) {
    Fail("unsupported JSON schema keyword 'multipleOf' for type integer at ", at, " (", why, ")");
  };
  if (!m.is_number() || !(m.get<double>() > 0 && m.get<double>() <= 1024) ||
      m.get<double>() != std::floor(m.get<double>())) {
    refuse("a whole number from 1 to 1024");
  }
  const auto number = [&](const char* key) -> std::optional<double> {
    if (schema.contains(key) && schema[key].is_number()) return schema[key].get<double>();
    return std::nullopt;
  };
  std::optional<double> low, high;
  if (auto v = number("minimum")) low = std::ceil(*v);
  if (auto v = number("exclusiveMinimum")) {
    low = std::max(low.value_or(-INFINITY), std::floor(*v) + 1);
  }
  if (auto v = number("maximum")) high = std::floor(*v);
  if (auto v = number("exclusiveMaximum")) {
    high = std::min(high.value_or(INFINITY), std::ceil(*v) - 1);
  }
  if (low.has_value() != high.has_value()) refuse("with a range bounded on both sides or neither");
  if (low && *high - *low + 1 > 10000) refuse("on a range of at most 10,000 values");
}

// `typed`: the parent gives the value a type of its own (propertyNames: a string).
void Check(const nlohmann::ordered_json& schema, const std::string& at, bool typed = false) {
  if (schema.is_boolean()) return;
  if (!schema.is_object()) Fail("the JSON schema at ", at, " must be an object or a boolean");
  if (!typed) {
    bool typing = false;
    for (const auto& [key, value] : schema.items()) typing = typing || In(kTyping, key);
    for (const auto& [key, value] : schema.items()) {
      if (!typing && In(kTypeSpecific, key)) {
        Fail("JSON schema keyword '", key, "' at ", at, " needs a 'type' beside it (without one "
             "the output there could be any value)");
      }
    }
  }
  // The keyword XGrammar would keep alone: what it drops beside it is refused by name (a type
  // beside const or enum is implied by their values).
  for (std::string_view first : kExclusive) {
    if (!schema.contains(std::string(first))) continue;
    for (const auto& [key, value] : schema.items()) {
      if (key == first || !In(kConstraining, key)) continue;
      if (key == "type" && (first == "const" || first == "enum")) continue;
      // pydantic writes a one-value Literal as const and an enum holding it.
      if (first == "const" && key == "enum" && value.is_array() &&
          std::find(value.begin(), value.end(), schema["const"]) != value.end()) {
        continue;
      }
      Fail("unsupported JSON schema keyword '", key, "' beside '", first, "' at ", at,
           " (only '", first, "' would constrain the output)");
    }
    break;
  }
  if (schema.contains("allOf") && schema["allOf"].is_array() && schema["allOf"].size() > 1) {
    Fail("unsupported JSON schema keyword 'allOf' with more than one schema at ", at);
  }
  if (schema.contains("$ref")) {
    const auto& ref = schema["$ref"];
    const std::string target = ref.is_string() ? ref.get<std::string>() : "";
    if (target != "#" && !target.starts_with("#/")) {
      Fail("unsupported JSON schema '$ref' ", ref.dump(), " at ", at,
           " (only JSON pointers inside the schema: '#' or '#/...')");
    }
  }
  if (schema.contains("multipleOf")) {
    if (HasType(schema, "number")) {
      Fail("unsupported JSON schema keyword 'multipleOf' for type number at ", at,
           " (integers only)");
    }
    if (HasType(schema, "integer")) CheckIntegerMultipleOf(schema, at);
  }
  for (const auto& [key, value] : schema.items()) {
    const std::string here = at + "/" + Escape(key);
    if (In(kUnsupported, key)) Fail("unsupported JSON schema keyword '", key, "' at ", at);
    if ((key == "minLength" || key == "maxLength") && (schema.contains("pattern") || schema.contains("format"))) {
      Fail("unsupported JSON schema keyword '", key, "' together with 'pattern' or 'format' at ", at);
    }
    if (In(kSchemaValued, key)) {
      if (key == "items" && value.is_array()) {
        for (size_t i = 0; i < value.size(); ++i) Check(value[i], here + "/" + std::to_string(i));
      } else {
        Check(value, here, /*typed=*/key == "propertyNames");
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
