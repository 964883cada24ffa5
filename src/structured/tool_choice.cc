#include "structured/tool_choice.h"

#include <cstring>
#include <string>

#include "base/error.h"

namespace latent::structured {
namespace {

using OJson = nlohmann::ordered_json;

struct Function {
  std::string name;
  OJson parameters;
};

std::vector<Function> Functions(const OJson& tools) {
  if (!tools.is_array()) Fail("tools must be a list");
  std::vector<Function> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const OJson& tool = tools[i];
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) {
      Fail("tools[", i, "] must be {\"type\": \"function\", \"function\": {...}}");
    }
    const OJson& f = tool["function"];
    if (!f.contains("name") || !f["name"].is_string()) Fail("tools[", i, "].function.name must be a string");
    OJson parameters = f.contains("parameters") ? f["parameters"] : OJson{{"type", "object"}};
    if (!parameters.is_object()) Fail("tools[", i, "].function.parameters must be an object");
    out.push_back({f["name"].get<std::string>(), std::move(parameters)});
  }
  return out;
}

// Function `i`'s parameters moved under "required"'s wrapper (at `at`, a JSON pointer): its
// definitions ($defs or definitions at its root) move to the wrapper's root $defs, prefixed
// "f<i>_" (two tools may both define "Item"), and every reference is rewritten to where its
// target now is: into those definitions, or under `at` (a "#" reference to its own root).
void Relocate(OJson& schema, const std::string& prefix, const std::string& at) {
  if (schema.is_array()) {
    for (OJson& item : schema) Relocate(item, prefix, at);
    return;
  }
  if (!schema.is_object()) return;
  for (auto& [key, value] : schema.items()) {
    if (key == "$ref" && value.is_string()) {
      const std::string ref = value.get<std::string>();
      if (ref != "#" && !ref.starts_with("#/")) continue;  // refused by the schema check
      std::string moved;
      for (const char* defs : {"#/$defs/", "#/definitions/"}) {
        if (ref.starts_with(defs)) moved = "#/$defs/" + prefix + ref.substr(std::strlen(defs));
      }
      value = moved.empty() ? at + ref.substr(1) : moved;
    } else {
      Relocate(value, prefix, at);
    }
  }
}

OJson Wrapped(OJson parameters, size_t i, OJson& defs) {
  const std::string prefix = "f" + std::to_string(i) + "_";
  Relocate(parameters, prefix, "#/items/anyOf/" + std::to_string(i) + "/properties/parameters");
  for (const char* key : {"$defs", "definitions"}) {
    if (!parameters.contains(key)) continue;
    if (!parameters[key].is_object()) {
      Fail("tools[", i, "].function.parameters.", key, " must be an object");
    }
    for (auto& [name, def] : parameters[key].items()) defs[prefix + name] = std::move(def);
    parameters.erase(key);
  }
  return parameters;
}

}  // namespace

OJson ToolCallSchema(const OJson& tools, const OJson& tool_choice) {
  const std::vector<Function> functions = Functions(tools);
  if (tool_choice.is_string()) {
    if (tool_choice != "required") {
      Fail("tool_choice '", tool_choice.get<std::string>(), "' does not constrain the output (only 'required' or a named function do)");
    }
    if (functions.empty()) Fail("tool_choice 'required' needs at least one tool");
    OJson any = OJson::array();
    OJson defs = OJson::object();  // every function's definitions, prefixed
    for (size_t i = 0; i < functions.size(); ++i) {
      const Function& f = functions[i];
      OJson parameters = Wrapped(f.parameters, i, defs);
      any.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", f.name}}}, {"parameters", parameters}}},
                     {"required", {"name", "parameters"}}});
    }
    OJson schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", std::move(any)}}}};
    if (!defs.empty()) schema["$defs"] = std::move(defs);
    return schema;
  }
  if (!tool_choice.is_object() || !tool_choice.contains("function") || !tool_choice["function"].is_object() ||
      !tool_choice["function"].contains("name") || !tool_choice["function"]["name"].is_string()) {
    Fail("tool_choice must be 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  const std::string name = tool_choice["function"]["name"].get<std::string>();
  for (const Function& f : functions) {
    if (f.name == name) return f.parameters;
  }
  Fail("tool_choice names function '", name, "', which is not in tools");
}

}  // namespace latent::structured
