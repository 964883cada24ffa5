#include "server/tool_template.h"

#include <string>

#include "base/error.h"

namespace latent::server {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr const char* kKey = "latent_probe_key";

// A user turn, an assistant turn calling one tool with `arguments`, and the tool's result.
OrderedJson ProbeMessages(const OrderedJson& arguments) {
  OrderedJson call = {{"id", "call_probe"},
                      {"type", "function"},
                      {"function", {{"name", "latent_probe"}, {"arguments", arguments}}}};
  return OrderedJson::array(
      {{{"role", "user"}, {"content", "probe"}},
       {{"role", "assistant"}, {"content", ""}, {"tool_calls", OrderedJson::array({call})}},
       {{"role", "tool"}, {"tool_call_id", "call_probe"}, {"content", "probe result"}}});
}

OrderedJson ProbeTools() {
  OrderedJson params = {{"type", "object"},
                        {"properties", {{kKey, {{"type", "string"}}}}}};
  return OrderedJson::array(
      {{{"type", "function"},
        {"function",
         {{"name", "latent_probe"}, {"description", "probe"}, {"parameters", params}}}}});
}

}  // namespace

bool TemplateReadsArgumentsAsObject(const tokenizer::ChatTemplate& chat_template) {
  std::string text;
  try {
    text = chat_template.Render(ProbeMessages({{kKey, "latent_probe_value"}}), ProbeTools(),
                                /*add_generation_prompt=*/true);
  } catch (const Error&) {
    return false;  // Objects break it (DeepSeek's string concatenation): JSON text it is.
  }
  // The tools list (tojson) shows the key quoted; only a template that took the arguments apart
  // shows it bare.
  const std::string key = kKey;
  size_t bare = 0;
  for (size_t p = text.find(key); p != std::string::npos; p = text.find(key, p + 1)) {
    const bool quoted = p > 0 && text[p - 1] == '"' && p + key.size() < text.size() &&
                        text[p + key.size()] == '"';
    if (!quoted) ++bare;
  }
  return bare > 0 && text.find("latent_probe_value") != std::string::npos;
}

}  // namespace latent::server
