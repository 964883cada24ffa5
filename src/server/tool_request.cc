#include "server/tool_request.h"

#include <set>

#include "base/error.h"
#include "base/json_depth.h"
#include "server/field_errors.h"
#include "server/tool_call_parser.h"

namespace latent::server {
namespace {

// A function name latent can recognise in the model's markup.
void CheckName(const Json& name, const std::string& field) {
  if (!name.is_string()) WrongType(field, "a string");
  const std::string& s = name.get_ref<const std::string&>();
  if (s.empty() || s.size() > 256 || s.find_first_of(" \t\r\n<>\"") != std::string::npos) {
    BadField(field, StrCat("'", field,
                           "' must be 1 to 256 characters without whitespace, quotes or "
                           "angle brackets, got '",
                           s.substr(0, 300), "'"));
  }
}

}  // namespace

OrderedJson ParseTools(const Json& body, const OrderedJson& ordered) {
  const Json* tools = Find(body, "tools");
  if (!tools) return nullptr;
  if (!tools->is_array()) WrongType("tools", "a list");
  if (tools->empty()) return nullptr;
  std::set<std::string> names;
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& tool = (*tools)[i];
    const std::string field = StrCat("tools[", i, "]");
    if (!tool.is_object()) WrongType(field, "an object");
    if (const Json* type = Find(tool, "type"); type && *type != "function") {
      BadField(field + ".type",
               StrCat("'", field, ".type' must be \"function\", got ", type->dump()));
    }
    const Json* fn = &RequiredObject(tool, field, "function");
    const Json* name = Find(*fn, "name");
    if (!name)
      BadField(field + ".function.name", StrCat("'", field, ".function.name' is required"),
               "missing_required_parameter");
    CheckName(*name, field + ".function.name");
    if (!names.insert(name->get<std::string>()).second) {
      BadField(field + ".function.name",
               StrCat("two tools are named '", name->get<std::string>(), "'"));
    }
    if (const Json* d = Find(*fn, "description"); d && !d->is_string()) {
      WrongType(field + ".function.description", "a string");
    }
    if (const Json* p = Find(*fn, "parameters"); p && !p->is_object()) {
      WrongType(field + ".function.parameters", "an object (a JSON schema)");
    }
    if (const Json* s = Find(*fn, "strict"); s && !s->is_boolean()) {
      WrongType(field + ".function.strict", "a boolean");
    }
  }
  return ordered["tools"];
}

ToolChoice ParseToolChoice(const Json& body, const OrderedJson& tools) {
  ToolChoice choice;
  const bool have_tools = tools.is_array() && !tools.empty();
  const Json* v = Find(body, "tool_choice");
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
      BadField("tool_choice",
               StrCat("'tool_choice' must be \"auto\", \"none\", \"required\" or "
                      "{\"type\": \"function\", \"function\": {\"name\": ...}}, got \"",
                      s.substr(0, 100), "\""));
    }
  } else if (v->is_object()) {
    if (const Json* type = Find(*v, "type"); !type || *type != "function") {
      BadField("tool_choice", "'tool_choice' as an object must have \"type\": \"function\"");
    }
    const Json* fn = Find(*v, "function");
    if (!fn || !fn->is_object()) {
      BadField("tool_choice",
               "'tool_choice' must name the function: {\"type\": \"function\", "
               "\"function\": {\"name\": ...}}");
    }
    const Json* name = Find(*fn, "name");
    if (!name || !name->is_string()) WrongType("tool_choice.function.name", "a string");
    choice.mode = ToolChoice::Mode::kFunction;
    choice.function = name->get<std::string>();
  } else {
    WrongType("tool_choice", "a string or an object");
  }
  if (!have_tools && (choice.mode == ToolChoice::Mode::kRequired ||
                      choice.mode == ToolChoice::Mode::kFunction)) {
    BadField("tool_choice", "'tool_choice' requires 'tools'");
  }
  if (choice.mode == ToolChoice::Mode::kFunction) {
    bool found = false;
    for (const OrderedJson& tool : tools) found |= tool["function"]["name"] == choice.function;
    if (!found) {
      BadField("tool_choice", StrCat("'tool_choice' names the function '", choice.function,
                                     "', which is not among 'tools'"));
    }
  }
  return choice;
}

void ValidateToolFields(const Json& m, size_t index) {
  const std::string field = StrCat("messages[", index, "]");
  if (const Json* id = Find(m, "tool_call_id"); id && !id->is_string()) {
    WrongType(field + ".tool_call_id", "a string");
  }
  const Json* calls = Find(m, "tool_calls");
  if (!calls) return;
  if (!calls->is_array()) WrongType(field + ".tool_calls", "a list of tool calls");
  for (size_t j = 0; j < calls->size(); ++j) {
    const Json& call = (*calls)[j];
    const std::string cf = StrCat(field, ".tool_calls[", j, "]");
    if (!call.is_object()) WrongType(cf, "an object");
    if (const Json* id = Find(call, "id"); id && !id->is_string())
      WrongType(cf + ".id", "a string");
    if (const Json* type = Find(call, "type"); type && *type != "function") {
      BadField(cf + ".type", StrCat("'", cf, ".type' must be \"function\""));
    }
    const Json* fn = &RequiredObject(call, cf, "function");
    const Json* name = Find(*fn, "name");
    if (!name || !name->is_string()) WrongType(cf + ".function.name", "a string");
    const Json* args = Find(*fn, "arguments");
    if (args && !args->is_string() && !args->is_object()) {
      WrongType(cf + ".function.arguments", "a string (JSON text) or an object");
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
          BadField(field, StrCat("'", field, "' nests deeper than ", kMaxJsonDepth, " levels"));
        }
        OrderedJson parsed = text.find_first_not_of(" \t\r\n") == std::string::npos
                                 ? OrderedJson::object()
                                 : OrderedJson::parse(text, nullptr, false);
        if (!parsed.is_object()) {
          BadField(field, StrCat("'", field,
                                 "' must be a JSON object (this chat template reads the "
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
