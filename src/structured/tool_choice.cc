#include "structured/tool_choice.h"

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

}  // namespace

OJson ToolCallSchema(const OJson& tools, const OJson& tool_choice) {
  const std::vector<Function> functions = Functions(tools);
  if (tool_choice.is_string()) {
    if (tool_choice != "required") {
      Fail("tool_choice '", tool_choice.get<std::string>(), "' does not constrain the output (only 'required' or a named function do)");
    }
    if (functions.empty()) Fail("tool_choice 'required' needs at least one tool");
    OJson any = OJson::array();
    for (const Function& f : functions) {
      any.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", f.name}}}, {"parameters", f.parameters}}},
                     {"required", {"name", "parameters"}}});
    }
    return {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", std::move(any)}}}};
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
