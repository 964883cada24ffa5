#include "tokenizer/json_fields.h"

#include "tokenizer/unicode.h"

namespace latent::tokenizer {

uint32_t SingleCharField(const Json& j, const char* key, std::string_view what) {
  const std::string s = Field<std::string>(j, key, what);
  size_t pos = 0;
  if (s.empty() || !IsValidUtf8(s) || (NextCodePoint(s, pos), pos != s.size())) {
    Fail("tokenizer.json: ", what, ": \"", key, "\" must be exactly one character, got '", s, "'");
  }
  pos = 0;
  return NextCodePoint(s, pos);
}

std::string PatternField(const Json& j, const char* key, std::string_view what, bool& literal) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_object() || it->size() != 1) {
    Fail("tokenizer.json: ", what, ": \"", key, "\" must be {\"String\": ...} or {\"Regex\": ...}");
  }
  const std::string kind = it->begin().key();
  const Json& value = it->begin().value();
  if (!value.is_string() || (kind != "String" && kind != "Regex")) {
    Fail("tokenizer.json: ", what, ": \"", key, "\" must be {\"String\": ...} or {\"Regex\": ...}");
  }
  literal = kind == "String";
  return value.get<std::string>();
}

}  // namespace latent::tokenizer
