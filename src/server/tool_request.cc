#include "server/tool_request.h"

#include <set>

#include "base/error.h"
#include "base/json_depth.h"
#include "server/tool_call_parser.h"

namespace latent::server {
namespace {

[[noreturn]] void Bad(const std::string& field, const std::string& message,
                      const std::string& code = "invalid_value") {
  throw ApiError(400, message, field, code);
}

[[noreturn]] void BadType(const std::string& field, const char* expected) {
  Bad(field, StrCat("'", field, "' must be ", expected), "invalid_type");
}

// A function name latent can recognise in the model's markup.
void CheckName(const Json& name, const std::string& field) {
  if (!name.is_string()) BadType(field, "a string");
  const std::string& s = name.get_ref<const std::string&>();
  if (s.empty() || s.size() > 256 || s.find_first_of(" \t\r\n<>\"") != std::string::npos) {
    Bad(field, StrCat("'", field, "' must be 1 to 256 characters without whitespace, quotes or "
                      "angle brackets, got '", s.substr(0, 300), "'"));
  }
}

const Json* Field(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

OrderedJson ParseTools(const Json& body, const OrderedJson& ordered) {
  const Json* tools = Field(body, "tools");
  if (!tools) return nullptr;
  if (!tools->is_array()) BadType("tools", "a list");
  if (tools->empty()) return nullptr;
  std::set<std::string> names;
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& tool = (*tools)[i];
    const std::string field = StrCat("tools[", i, "]");
    if (!tool.is_object()) BadType(field, "an object");
    if (const Json* type = Field(tool, "type"); type && *type != "function") {
      Bad(field + ".type", StrCat("'", field, ".type' must be \"function\", got ", type->dump()));
    }
    const Json* fn = Field(tool, "function");
    if (!fn) Bad(field + ".function", StrCat("'", field, ".function' is required"),
                 "missing_required_parameter");
    if (!fn->is_object()) BadType(field + ".function", "an object");
    const Json* name = Field(*fn, "name");
    if (!name) Bad(field + ".function.name", StrCat("'", field, ".function.name' is required"),
                   "missing_required_parameter");
    CheckName(*name, field + ".function.name");
    if (!names.insert(name->get<std::string>()).second) {
      Bad(field + ".function.name",
          StrCat("two tools are named '", name->get<std::string>(), "'"));
    }
    if (const Json* d = Field(*fn, "description"); d && !d->is_string()) {
      BadType(field + ".function.description", "a string");
    }
    if (const Json* p = Field(*fn, "parameters"); p && !p->is_object()) {
      BadType(field + ".function.parameters", "an object (a JSON schema)");
    }
    if (const Json* s = Field(*fn, "strict"); s && !s->is_boolean()) {
      BadType(field + ".function.strict", "a boolean");
    }
  }
  return ordered["tools"];
}

ToolChoice ParseToolChoice(const Json& body, const OrderedJson& tools) {
  ToolChoice choice;
  const bool have_tools = tools.is_array() && !tools.empty();
  const Json* v = Field(body, "tool_choice");
  if (!v) {
    choice.mode = have_tools ? ToolChoice::Mode::kAuto : ToolChoice::Mode::kNone;
    return choice;
  }
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    if (s == "auto") {
      choice.mode = ToolChoice::Mode::kAuto;
    } else if (s == "none") {
      choice.mode = ToolChoice::Mode::kNone;
    } else if (s == "required") {
      choice.mode = ToolChoice::Mode::kRequired;
    } else {
      Bad("tool_choice", StrCat("'tool_choice' must be \"auto\", \"none\", \"required\" or "
                                "{\"type\": \"function\", \"function\": {\"name\": ...}}, got \"",
                                s.substr(0, 100), "\""));
    }
  } else if (v->is_object()) {
    if (const Json* type = Field(*v, "type"); !type || *type != "function") {
      Bad("tool_choice", "'tool_choice' as an object must have \"type\": \"function\"");
    }
    const Json* fn = Field(*v, "function");
    if (!fn || !fn->is_object()) {
      Bad("tool_choice", "'tool_choice' must name the function: {\"type\": \"function\", "
                         "\"function\": {\"name\": ...}}");
    }
    const Json* name = Field(*fn, "name");
    if (!name || !name->is_string()) BadType("tool_choice.function.name", "a string");
    choice.mode = ToolChoice::Mode::kFunction;
    choice.function = name->get<std::string>();
  } else {
    BadType("tool_choice", "a string or an object");
  }
  if (!have_tools && (choice.mode == ToolChoice::Mode::kRequired ||
                      choice.mode == ToolChoice::Mode::kFunction)) {
    Bad("tool_choice", "'tool_choice' requires 'tools'");
  }
  if (choice.mode == ToolChoice::Mode::kFunction) {
    bool found = false;
    for (const OrderedJson& tool : tools) found |= tool["function"]["name"] == choice.function;
    if (!found) {
      Bad("tool_choice", StrCat("'tool_choice' names the function '", choice.function,
                                "', which is not among 'tools'"));
    }
  }
  return choice;
}

void ValidateToolFields(const Json& m, size_t index) {
  const std::string field = StrCat("messages[", index, "]");
  if (const Json* id = Field(m, "tool_call_id"); id && !id->is_string()) {
    BadType(field + ".tool_call_id", "a string");
  }
  const Json* calls = Field(m, "tool_calls");
  if (!calls) return;
  if (!calls->is_array()) BadType(field + ".tool_calls", "a list of tool calls");
  for (size_t j = 0; j < calls->size(); ++j) {
    const Json& call = (*calls)[j];
    const std::string cf = StrCat(field, ".tool_calls[", j, "]");
    if (!call.is_object()) BadType(cf, "an object");
    if (const Json* id = Field(call, "id"); id && !id->is_string()) BadType(cf + ".id", "a string");
    if (const Json* type = Field(call, "type"); type && *type != "function") {
      Bad(cf + ".type", StrCat("'", cf, ".type' must be \"function\""));
    }
    const Json* fn = Field(call, "function");
    if (!fn) Bad(cf + ".function", StrCat("'", cf, ".function' is required"),
                 "missing_required_parameter");
    if (!fn->is_object()) BadType(cf + ".function", "an object");
    const Json* name = Field(*fn, "name");
    if (!name || !name->is_string()) BadType(cf + ".function.name", "a string");
    const Json* args = Field(*fn, "arguments");
    if (args && !args->is_string() && !args->is_object()) {
      BadType(cf + ".function.arguments", "a string (JSON text) or an object");
    }
  }
}

void ShapeToolCallTurns(OrderedJson& messages, bool as_objects, bool content_none) {
  if (!messages.is_array()) return;
  for (size_t i = 0; i < messages.size(); ++i) {
    OrderedJson& m = messages[i];
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    // None only for an assistant turn that calls something (the template keeps it only there,
    // ChatTemplate::set_tool_call_content_none): elsewhere a template would lose the turn or
    // fail on none.
    const bool calls_turn =
        m.contains("role") && m["role"] == "assistant" && !m["tool_calls"].empty();
    // Before taking a reference into m: adding "content" may grow m's ordered map and move its
    // elements.
    if (!m.contains("content") || m["content"].is_null()) {
      m["content"] = content_none && calls_turn ? OrderedJson(nullptr) : OrderedJson("");
    }
    OrderedJson& calls = m["tool_calls"];
    for (size_t j = 0; j < calls.size(); ++j) {
      if (!calls[j].is_object() || !calls[j].contains("function")) continue;
      OrderedJson& fn = calls[j]["function"];
      if (!fn.is_object() || !fn.contains("arguments")) continue;
      OrderedJson& args = fn["arguments"];
      if (as_objects && args.is_string()) {
        const std::string& text = args.get_ref<const std::string&>();
        const std::string field =
            StrCat("messages[", i, "].tool_calls[", j, "].function.arguments");
        // The body's depth check cannot see into this string, and the parsed object is copied
        // (recursively) on its way to the template.
        if (JsonNestsDeeperThan(text, kMaxJsonDepth)) {
          Bad(field, StrCat("'", field, "' nests deeper than ", kMaxJsonDepth, " levels"));
        }
        OrderedJson parsed = text.find_first_not_of(" \t\r\n") == std::string::npos
                                 ? OrderedJson::object()
                                 : OrderedJson::parse(text, nullptr, false);
        if (!parsed.is_object()) {
          Bad(field, StrCat("'", field, "' must be a JSON object (this chat template reads the "
                            "arguments one by one)"));
        }
        args = std::move(parsed);
      } else if (!as_objects && args.is_object()) {
        args = PythonJsonDumps(args);
      }
    }
  }
}

}  // namespace latent::server
