#include "server/chat_request.h"

#include <optional>
#include <string>

#include "base/error.h"
#include "server/field_errors.h"
#include "server/tool_request.h"
#include "tokenizer/chat_template/chat_template.h"

namespace latent::server {
namespace {

// Chat content: a string, null, or a list of {"type": "text", "text": ...} parts (joined with
// newlines, as vLLM does).
OrderedJson FlattenContent(const Json& content, size_t index) {
  const std::string field = StrCat("messages[", index, "].content");
  if (content.is_null()) return nullptr;
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) WrongType(field, "a string or a list of content parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    // Each part's errors name it: messages[0].content[1].type.
    const std::string part_field = StrCat(field, "[", i, "]");
    if (!part.is_object()) WrongType(part_field, "a content part (an object)");
    const Json* type = Find(part, "type");
    if (type && !type->is_string()) WrongType(part_field + ".type", "a string");
    if (!type || *type != "text") {
      BadField(part_field + ".type",
               StrCat("content part type '", type ? type->get<std::string>() : "",
                      "' is not supported (only 'text')"));
    }
    const Json* part_text = Find(part, "text");
    if (!part_text) {
      BadField(part_field + ".text", "a text content part needs 'text'",
               "missing_required_parameter");
    }
    if (!part_text->is_string()) WrongType(part_field + ".text", "a string");
    if (i > 0) text += "\n";
    text += part_text->get_ref<const std::string&>();
  }
  return text;
}

OrderedJson ParseMessages(const Json& body, const OrderedJson& ordered) {
  const Json* messages = Find(body, "messages");
  if (!messages) BadField("messages", "'messages' is required", "missing_required_parameter");
  if (!messages->is_array()) WrongType("messages", "a list of messages");
  if (messages->empty()) BadField("messages", "'messages' is empty");
  OrderedJson out = OrderedJson::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    const std::string field = StrCat("messages[", i, "]");
    if (!m.is_object()) WrongType(field, "an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      BadField(field + ".role", StrCat("'", field, ".role' must be a string"), "invalid_type");
    }
    OrderedJson message = ordered["messages"][i];
    if (role->get_ref<const std::string&>() == "developer") message["role"] = "system";
    if (m.contains("content")) message["content"] = FlattenContent(m["content"], i);
    ValidateToolFields(m, i);
    out.push_back(std::move(message));
  }
  return out;
}

void RefuseBoth(bool add_generation_prompt, bool continue_final_message) {
  if (continue_final_message && add_generation_prompt) {
    BadField("continue_final_message",
             "'continue_final_message' and 'add_generation_prompt' cannot both be true: one "
             "continues the final message, the other starts a new assistant message");
  }
}

// add_generation_prompt and continue_final_message, the ends a chat prompt can have: a new
// assistant turn's header (the default), or the final message left open for the model to continue
// (vLLM's and transformers' continue_final_message). add_generation_prompt defaults to false when
// continuing; both true is a 400, as transformers refuses them together. The final message may
// have any role, as in transformers and vLLM (a user's text can be continued too). An
// add_generation_prompt among the template kwargs wins, as vLLM updates apply_chat_template's
// arguments with them: checked here as the top-level one is (a bool, named by its place; with
// continue_final_message, the same 400), not left to fail at render as the template's error.
void ParsePromptEnd(const Json& body, bool* add_generation_prompt, bool* continue_final_message) {
  *continue_final_message = GetBool(body, "continue_final_message", false);
  *add_generation_prompt = GetBool(body, "add_generation_prompt", !*continue_final_message);
  // Both true at the top level is refused whatever the kwargs say, as vLLM's request validator
  // refuses it.
  RefuseBoth(*add_generation_prompt, *continue_final_message);
  if (const Json* kwargs = Find(body, "chat_template_kwargs")) {
    if (auto it = kwargs->find("add_generation_prompt"); it != kwargs->end()) {
      if (!it->is_boolean()) WrongType(tokenizer::kKwargsAddGenerationPrompt, "a boolean");
      *add_generation_prompt = it->get<bool>();
      RefuseBoth(*add_generation_prompt, *continue_final_message);
    }
  }
}

}  // namespace

ChatFields ParseChatFields(const Json& body, const OrderedJson& ordered) {
  ChatFields out;
  out.messages = ParseMessages(body, ordered);
  out.tools = ParseTools(body, ordered);
  if (const Json* k = Find(body, "chat_template_kwargs")) {
    if (!k->is_object()) WrongType("chat_template_kwargs", "an object");
    out.chat_template_kwargs = ordered["chat_template_kwargs"];
  }
  ParsePromptEnd(body, &out.add_generation_prompt, &out.continue_final_message);
  return out;
}

}  // namespace latent::server
