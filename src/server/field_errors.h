// The 400s that name a request field, and the lookups that raise them: one set for every file
// that checks a request's fields (openai_schema.cc, chat_request.cc, tool_request.cc), so a
// field is refused in the same words wherever it is checked.
#pragma once

#include <string>

#include "server/openai_schema.h"

namespace latent::server {

// ApiError 400 naming `field` (OpenAI's "param"), code invalid_value unless given.
[[noreturn]] void BadField(const std::string& field, const std::string& message,
                           const std::string& code = "invalid_value");

// ApiError 400 "'field' must be <expected>", code invalid_type.
[[noreturn]] void WrongType(const std::string& field, const char* expected);

// The value of `key`, or nullptr when it is absent or null (null means "default" in OpenAI's API).
const Json* Find(const Json& object, const char* key);

// The object `key` of `object` (whose field name is `field`): a 400 naming `field`.`key` when it
// is absent or null (missing_required_parameter) or not an object.
const Json& RequiredObject(const Json& object, const std::string& field, const char* key);

// The boolean `key`, `fallback` when absent or null; WrongType otherwise.
bool GetBool(const Json& object, const char* key, bool fallback);

}  // namespace latent::server
