#include "server/chat_request.h"

#include <optional>
#include <string>

#include "base/error.h"
#include "server/tool_request.h"

namespace latent::server {
namespace {

// (Named apart from openai_schema.cc's helpers: a unity build compiles both in one unit.)
[[noreturn]] void BadChatField(const std::string& field, const std::string& message,
                           const std::string& code = "invalid_value") {
  throw ApiError(400, message, field, code);
}

[[noreturn]] void WrongChatType(const std::string& field, const char* expected) {
  BadChatField(field, StrCat("'", field, "' must be ", expected), "invalid_type");
}

// The value of `key`, or nullptr when it is absent or null (null means "default" in OpenAI's API).
const Json* Member(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

bool ChatBool(const Json& object, const char* key, bool fallback) {
  const Json* v = Member(object, key);
  if (!v) return fallback;
  if (!v->is_boolean()) WrongChatType(key, "a boolean");
  return v->get<bool>();
}

// Chat content: a string, null, or a list of {"type": "text", "text": ...} parts (joined with
// newlines, as vLLM does).
OrderedJson FlattenContent(const Json& content, size_t index) {
  const std::string field = StrCat("messages[", index, "].content");
  if (content.is_null()) return nullptr;
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) WrongChatType(field, "a string or a list of content parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    if (!part.is_object()) WrongChatType(field, "a string or a list of content parts");
    const Json* type = Member(part, "type");
    if (type && !type->is_string()) WrongChatType(field + ".type", "a string");
    if (!type || *type != "text") {
      BadChatField(field, StrCat("content part type '", type ? type->get<std::string>() : "",
                             "' is not supported (only 'text')"));
    }
    const Json* part_text = Member(part, "text");
    if (!part_text) BadChatField(field, "a text content part needs 'text'");
    if (!part_text->is_string()) WrongChatType(field + ".text", "a string");
    if (i > 0) text += "\n";
    text += part_text->get_ref<const std::string&>();
  }
  return text;
}

OrderedJson ParseMessages(const Json& body, const OrderedJson& ordered) {
  const Json* messages = Member(body, "messages");
  if (!messages) BadChatField("messages", "'messages' is required", "missing_required_parameter");
  if (!messages->is_array()) WrongChatType("messages", "a list of messages");
  if (messages->empty()) BadChatField("messages", "'messages' is empty");
  OrderedJson out = OrderedJson::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    const std::string field = StrCat("messages[", i, "]");
    if (!m.is_object()) WrongChatType(field, "an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      BadChatField(field + ".role", StrCat("'", field, ".role' must be a string"), "invalid_type");
    }
    OrderedJson message = ordered["messages"][i];
    if (role->get_ref<const std::string&>() == "developer") message["role"] = "system";
    if (m.contains("content")) message["content"] = FlattenContent(m["content"], i);
    ValidateToolFields(m, i);
    out.push_back(std::move(message));
  }
  return out;
}

// add_generation_prompt and continue_final_message, the ends a chat prompt can have: a new
// assistant turn's header (the default), or the final message left open for the model to continue
// (vLLM's and transformers' continue_final_message). add_generation_prompt defaults to false when
// continuing; both true is a 400, as transformers refuses them together. The final message may
// have any role, as in transformers and vLLM (a user's text can be continued too).
void ParsePromptEnd(const Json& body, bool* add_generation_prompt, bool* continue_final_message) {
  *continue_final_message = ChatBool(body, "continue_final_message", false);
  *add_generation_prompt = ChatBool(body, "add_generation_prompt", !*continue_final_message);
  if (*continue_final_message && *add_generation_prompt) {
    BadChatField("continue_final_message",
             "'continue_final_message' and 'add_generation_prompt' cannot both be true: one "
             "continues the final message, the other starts a new assistant message");
  }
}

}  // namespace

ChatFields ParseChatFields(const Json& body, const OrderedJson& ordered) {
  ChatFields out;
  out.messages = ParseMessages(body, ordered);
  out.tools = ParseTools(body, ordered);
  if (const Json* k = Member(body, "chat_template_kwargs")) {
    if (!k->is_object()) WrongChatType("chat_template_kwargs", "an object");
    out.chat_template_kwargs = ordered["chat_template_kwargs"];
  }
  ParsePromptEnd(body, &out.add_generation_prompt, &out.continue_final_message);
  return out;
}

}  // namespace latent::server
