#include "server/field_errors.h"

#include "base/error.h"

namespace latent::server {

void BadField(const std::string& field, const std::string& message, const std::string& code) {
  throw ApiError(400, message, field, code);
}

void WrongType(const std::string& field, const char* expected) {
  BadField(field, StrCat("'", field, "' must be ", expected), "invalid_type");
}

const Json* Find(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

const Json& RequiredObject(const Json& object, const std::string& field, const char* key) {
  const std::string path = StrCat(field, ".", key);
  const Json* value = Find(object, key);
  if (!value) BadField(path, StrCat("'", path, "' is required"), "missing_required_parameter");
  if (!value->is_object()) WrongType(path, "an object");
  return *value;
}

bool GetBool(const Json& object, const char* key, bool fallback) {
  const Json* v = Find(object, key);
  if (!v) return fallback;
  if (!v->is_boolean()) WrongType(key, "a boolean");
  return v->get<bool>();
}

}  // namespace latent::server
