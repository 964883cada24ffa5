// The JSON Schema features structured output cannot enforce. XGrammar ignores some keywords (with
// a log line): a schema using them would be accepted and the output could break it. Such a schema
// is refused instead, naming the keyword and where it is.
#pragma once

#include <nlohmann/json.hpp>

namespace latent::structured {

// Throws latent::Error ("unsupported JSON schema keyword 'uniqueItems' at #/properties/tags")
// for a keyword the grammar cannot enforce, or a schema (or subschema) that is neither an object
// nor a boolean.
void CheckJsonSchemaSupported(const nlohmann::ordered_json& schema);

}  // namespace latent::structured
