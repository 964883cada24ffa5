#include "structured/json_schema_size.h"

#include <string>
#include <unordered_set>

#include "base/error.h"
#include "structured/json_schema_keywords.h"

namespace latent::structured {
namespace {

using OrderedJson = nlohmann::ordered_json;

size_t CountValues(const OrderedJson& value) {
  size_t count = 1;
  if (value.is_structured()) {
    for (const OrderedJson& item : value) count += CountValues(item);
  }
  return count;
}

// Over the subschemas where XGrammar reads a schema (as json_schema_check's walk).
size_t CountOptionalProperties(const OrderedJson& schema) {
  if (!schema.is_object()) return 0;
  size_t count = 0;
  const auto properties = schema.find("properties");
  if (properties != schema.end() && properties->is_object()) {
    std::unordered_set<std::string> required;
    if (const auto r = schema.find("required"); r != schema.end() && r->is_array()) {
      for (const OrderedJson& name : *r) {
        if (name.is_string()) required.insert(name.get<std::string>());
      }
    }
    for (const auto& [name, sub] : properties->items()) count += !required.count(name);
  }
  for (const auto& [key, value] : schema.items()) {
    if (In(kSchemaValued, key)) {
      if (value.is_array()) {  // "items" as a list (draft 4's tuples)
        for (const OrderedJson& sub : value) count += CountOptionalProperties(sub);
      } else {
        count += CountOptionalProperties(value);
      }
    } else if ((In(kSchemaArrays, key) && value.is_array()) ||
               (In(kSchemaMaps, key) && value.is_object())) {
      for (const OrderedJson& sub : value) count += CountOptionalProperties(sub);
    }
  }
  return count;
}

}  // namespace

JsonSchemaSize MeasureJsonSchema(const OrderedJson& schema) {
  return {CountValues(schema), CountOptionalProperties(schema)};
}

void CheckJsonSchemaSize(const JsonSchemaSize& size, std::string_view what, size_t max_values,
                         size_t max_optional_properties) {
  if (size.values > max_values) {
    Fail("too many values in ", what, ": ", size.values,
         " at any depth (objects, arrays, strings, numbers, booleans and nulls), more than the ",
         max_values, " allowed");
  }
  if (size.optional_properties > max_optional_properties) {
    Fail("too many optional properties in ", what, ": ", size.optional_properties,
         " (properties their object does not list in 'required'), more than the ",
         max_optional_properties, " allowed");
  }
}

}  // namespace latent::structured
