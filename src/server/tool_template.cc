#include "server/tool_template.h"

#include <optional>
#include <regex>
#include <set>
#include <string>

#include "base/error.h"
#include "server/tool_request.h"

namespace latent::server {
namespace {

constexpr const char* kKey = "latent_probe_key";
constexpr const char* kValue = "latent_probe_value";
// The probe tool's parameter: a name of its own, so that only the call's rendering tells how a
// template reads the arguments (one printing the tools schema key by key shows this one).
constexpr const char* kParameter = "latent_probe_parameter";

// A user turn, an assistant turn (`content`) calling one tool with `arguments`, and the tool's
// result.
OrderedJson ProbeMessages(const OrderedJson& content, const OrderedJson& arguments) {
  OrderedJson call = {{"id", "call_probe"},
                      {"type", "function"},
                      {"function", {{"name", "latent_probe"}, {"arguments", arguments}}}};
  return OrderedJson::array(
      {{{"role", "user"}, {"content", "probe"}},
       {{"role", "assistant"}, {"content", content}, {"tool_calls", OrderedJson::array({call})}},
       {{"role", "tool"}, {"tool_call_id", "call_probe"}, {"content", "probe result"}}});
}

OrderedJson ProbeTools() {
  OrderedJson params = {{"type", "object"},
                        {"properties", {{kParameter, {{"type", "string"}}}}}};
  return OrderedJson::array(
      {{{"type", "function"},
        {"function",
         {{"name", "latent_probe"}, {"description", "probe"}, {"parameters", params}}}}});
}

OrderedJson ProbeArguments(bool as_object) {
  OrderedJson object = {{kKey, kValue}};
  return as_object ? object : OrderedJson(object.dump());
}

// The probe's rendering (with the probe tool or no tools: the template Render picks for that),
// or nothing when the template fails on it.
std::optional<std::string> TryRender(const tokenizer::ChatTemplate& chat_template,
                                     const OrderedJson& messages, bool with_tools) {
  try {
    return chat_template.Render(messages, with_tools ? ProbeTools() : OrderedJson(),
                                /*add_generation_prompt=*/true);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// The call's argument value is in the rendering (the tools list never holds it).
bool ShowsCall(const std::optional<std::string>& text) {
  return text && text->find(kValue) != std::string::npos;
}

// Whether `text` shows the argument value other than inside the arguments printed whole: `{`, the
// key and the value in double quotes (tojson) or single ones (Python's repr), `}`.
bool TakesApart(const std::string& text) {
  static const std::regex kWhole(std::string(R"re(\{\s*(["']))re") + kKey +
                                 R"re(\1\s*:\s*\1)re" + kValue + R"re(\1\s*\})re");
  return std::regex_replace(text, kWhole, "").find(kValue) != std::string::npos;
}

}  // namespace

bool TemplateWantsToolCallContentNone(const tokenizer::ChatTemplate& chat_template,
                                      bool with_tools) {
  const std::string name = chat_template.TemplateFor(with_tools);
  if (name.empty()) return false;
  tokenizer::ChatTemplate keeping = chat_template;
  keeping.set_tool_call_content_none(name, true);
  tokenizer::ChatTemplate dropping = chat_template;
  dropping.set_tool_call_content_none(name, false);
  // JSON text first, as clients send it; objects for a template that fails on text.
  for (bool as_object : {false, true}) {
    const OrderedJson arguments = ProbeArguments(as_object);
    const std::optional<std::string> none =
        TryRender(keeping, ProbeMessages(nullptr, arguments), with_tools);
    const std::optional<std::string> empty =
        TryRender(dropping, ProbeMessages("", arguments), with_tools);
    if (!none && !empty) continue;
    // None only where "" loses the call and none keeps it: everywhere else "" (as vLLM and
    // transformers' users send), which no template fails on for being none.
    return ShowsCall(none) && !ShowsCall(empty);
  }
  return false;
}

bool TemplateReadsArgumentsAsObject(const tokenizer::ChatTemplate& chat_template,
                                    bool with_tools) {
  if (chat_template.TemplateFor(with_tools).empty()) return false;
  const OrderedJson content =
      chat_template.tool_call_content_none(with_tools) ? OrderedJson(nullptr) : OrderedJson("");
  const auto render = [&](bool as_object) {
    return TryRender(chat_template, ProbeMessages(content, ProbeArguments(as_object)), with_tools);
  };
  const std::optional<std::string> object = render(/*as_object=*/true);
  // Objects break it (DeepSeek's string concatenation) or lose the call: JSON text it is.
  if (!ShowsCall(object)) return false;
  // Text breaks it or loses the call (an items loop: "'str object' has no attribute 'items'"),
  // however it prints the keys it took apart (bare, `<parameter name="{{ k }}">`, in quotes).
  if (!ShowsCall(render(/*as_object=*/false))) return true;
  // Both show the call: objects where the template took the object apart (GLM-4.5's items loop,
  // whose fallback prints text whole), JSON text where it printed the object whole (tojson, or
  // Python's repr as `{{ arguments }}` prints a dict): such a template prints text as it comes.
  return TakesApart(*object);
}

ToolTemplateShape ProbeToolTemplate(tokenizer::ChatTemplate& chat_template) {
  ToolTemplateShape shape;
  // Each template Render can pick, as it picks it: a tokenizer's "tool_use" template with tools,
  // its "default" one without (and with, when there is no "tool_use").
  std::set<std::string> probed;
  for (bool with_tools : {true, false}) {
    const std::string name = chat_template.TemplateFor(with_tools);
    if (name.empty() || !probed.insert(name).second) continue;
    shape.templates.push_back(name);
    const bool none = TemplateWantsToolCallContentNone(chat_template, with_tools);
    chat_template.set_tool_call_content_none(name, none);
    if (none) shape.content_none_templates.push_back(name);
    // After the content: the arguments probe renders the content as this template keeps it.
    const bool objects = TemplateReadsArgumentsAsObject(chat_template, with_tools);
    chat_template.set_tool_call_arguments_as_objects(name, objects);
    if (objects) shape.arguments_object_templates.push_back(name);
  }
  return shape;
}

std::string ToolTemplateShapeText(const ToolTemplateShape& shape) {
  // `yes` in the templates `names` lists, `no` in the others; one word when it holds for all.
  const auto per_template = [&](const std::vector<std::string>& names, const char* yes,
                                const char* no) {
    if (names.empty()) return std::string(no);
    std::string text = yes;
    if (names.size() == shape.templates.size()) return text;
    text += " in template";
    for (const std::string& name : names) text += " '" + name + "'";
    return StrCat(text, ", ", no, " in the others");
  };
  return StrCat(per_template(shape.arguments_object_templates, "objects", "JSON text"),
                " and a null content beside them as ",
                per_template(shape.content_none_templates, "none", "\"\""));
}

void ShapeForTemplate(const tokenizer::ChatTemplate& chat_template, bool with_tools,
                      OrderedJson& messages) {
  ShapeToolCallTurns(messages, chat_template.tool_call_arguments_as_objects(with_tools),
                     chat_template.tool_call_content_none(with_tools));
}

}  // namespace latent::server
