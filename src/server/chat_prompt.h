// A chat request's prompt as the server renders it, for /v1/chat/completions and /tokenize alike.
#pragma once

#include <string>

#include "base/error.h"
#include "server/openai_schema.h"
#include "server/tool_request.h"
#include "tokenizer/chat_template/chat_template.h"

namespace latent::server {

// The messages (tool-call turns shaped as the template reads them: the arguments as
// `tool_arguments_as_objects` says, a null content as tool_call_content_none says for the
// template this request picks; server/tool_template.h), tools, prompt end and template kwargs
// of `r` rendered by `chat_template`; the template's error is a 400 naming
// "messages". `Request`: a parsed chat completion or /tokenize request (the same field names).
template <class Request>
std::string RenderChatPrompt(const tokenizer::ChatTemplate& chat_template,
                             bool tool_arguments_as_objects, const Request& r) {
  tokenizer::ChatRequest chat;
  chat.messages = r.messages;
  chat.tools = r.tools;
  ShapeToolCallTurns(chat.messages, tool_arguments_as_objects,
                     chat_template.tool_call_content_none(!chat.tools.is_null()));
  chat.add_generation_prompt = r.add_generation_prompt;
  chat.continue_final_message = r.continue_final_message;
  chat.kwargs = r.chat_template_kwargs;
  try {
    return chat_template.Render(chat);
  } catch (const Error& e) {
    throw RequestError(e, "the chat template failed on these messages: ", "messages");
  }
}

}  // namespace latent::server
