// Reading tokenizer.json components: typed field access whose errors name the component, so a bad
// or unsupported file fails with "tokenizer.json: Split pre-tokenizer: 'behavior' ..." instead of
// a bare nlohmann exception.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/error.h"

namespace latent::tokenizer {

using Json = nlohmann::json;

// The "type" of a component object; `what` says which kind (normalizer, decoder, ...).
inline std::string TypeOf(const Json& j, std::string_view what) {
  if (!j.is_object()) Fail("tokenizer.json: a ", what, " must be an object, got ", j.type_name());
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) Fail("tokenizer.json: a ", what, " has no \"type\"");
  return it->get<std::string>();
}

// Field `key` of `j` as T; missing, null or mistyped fields fail naming `what`.
template <typename T>
T Field(const Json& j, const char* key, std::string_view what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) Fail("tokenizer.json: ", what, ": missing \"", key, "\"");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    Fail("tokenizer.json: ", what, ": bad \"", key, "\": ", e.what());
  }
}

// Like Field, but a missing or null field gives `fallback`.
template <typename T>
T FieldOr(const Json& j, const char* key, T fallback, std::string_view what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return Field<T>(j, key, what);
}

// Array field `key` (missing or null: empty), failing if it is something else.
inline const Json& ArrayField(const Json& j, const char* key, std::string_view what) {
  static const Json empty = Json::array();
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return empty;
  if (!it->is_array()) Fail("tokenizer.json: ", what, ": \"", key, "\" must be an array");
  return *it;
}

// A single character given as a string (Metaspace replacement, Strip content), as a code point.
uint32_t SingleCharField(const Json& j, const char* key, std::string_view what);

// A {"String": s} or {"Regex": r} pattern; returns the text and sets `literal`.
std::string PatternField(const Json& j, const char* key, std::string_view what, bool& literal);

}  // namespace latent::tokenizer
