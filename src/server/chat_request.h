// The chat fields of a request (messages, tools, chat_template_kwargs, add_generation_prompt,
// continue_final_message) parsed and checked in one place for every front that renders a chat:
// /v1/chat/completions and /tokenize (openai_schema.cc), `latent generate` request lines'
// "messages" and the Python module's LLM.chat / apply_chat_template (generate/request_line.cc).
// So one conversation gives the same prompt everywhere and is refused with the same message.
#pragma once

#include <utility>

#include "server/openai_schema.h"

namespace latent::server {

struct ChatFields {
  // Each message as given (key order kept), with "developer" as "system" (OpenAI's newer name
  // for it, which chat templates do not know) and a content of text parts joined into a string.
  OrderedJson messages;
  OrderedJson tools;                  // null, or the tools array (tool_request.h).
  OrderedJson chat_template_kwargs;   // null, or an object of template variables.
  // Defaults to false with continue_final_message; chat_template_kwargs' own wins.
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};

// Throws ApiError 400 naming the field: 'messages' absent, not a list or empty; a message not
// an object or without a string role; a content not a string, null or a list of {"type":
// "text", "text"} parts (joined with newlines, as vLLM joins them); bad tool-call fields
// (ValidateToolFields), tools (ParseTools) or chat_template_kwargs (not an object, or an
// add_generation_prompt in it not a bool: it wins over the top-level one, as in vLLM);
// add_generation_prompt and continue_final_message both true. `body` is the request; `ordered`
// the same request parsed keeping key order (which templates may show), of which only the
// "messages", "tools" and "chat_template_kwargs" members are read.
ChatFields ParseChatFields(const Json& body, const OrderedJson& ordered);

// Moves `chat` into the members of the same names of `request` (a GenerationRequest or a
// TokenizeRequest, openai_schema.h), so the endpoints that take a chat copy the same fields.
template <typename ChatRequest>
void TakeChatFields(ChatFields chat, ChatRequest& request) {
  request.messages = std::move(chat.messages);
  request.tools = std::move(chat.tools);
  request.chat_template_kwargs = std::move(chat.chat_template_kwargs);
  request.add_generation_prompt = chat.add_generation_prompt;
  request.continue_final_message = chat.continue_final_message;
}

}  // namespace latent::server
