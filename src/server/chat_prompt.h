// A chat request's prompt as the server renders it, for /v1/chat/completions and /tokenize alike,
// and as request lines (generate/request_line.h) and the Python module render theirs.
#pragma once

#include <string>

#include "base/error.h"
#include "server/openai_schema.h"
#include "server/tool_template.h"
#include "tokenizer/chat_template/chat_template.h"

namespace latent::server {

// What the chat template failed with is prefixed by this (its message, and the 400's).
inline constexpr const char* kChatTemplateFailed = "the chat template failed on these messages: ";

// The messages (tool-call turns shaped as the template this request picks reads them:
// ShapeForTemplate, server/tool_template.h), tools, prompt end and template kwargs of `r`
// rendered by `chat_template`. `Request`: a parsed chat completion or /tokenize request, or
// ChatFields (chat_request.h): the same field names. The template's error is thrown as it is
// (a latent::Error); ShapeForTemplate's as an ApiError naming the field.
template <class Request>
std::string RenderChatFields(const tokenizer::ChatTemplate& chat_template, const Request& r) {
  tokenizer::ChatRequest chat;
  chat.messages = r.messages;
  chat.tools = r.tools;
  ShapeForTemplate(chat_template, !chat.tools.is_null(), chat.messages);
  chat.add_generation_prompt = r.add_generation_prompt;
  chat.continue_final_message = r.continue_final_message;
  chat.kwargs = r.chat_template_kwargs;
  return chat_template.Render(chat);
}

// RenderChatFields for the server: the template's error is a 400 naming "messages".
template <class Request>
std::string RenderChatPrompt(const tokenizer::ChatTemplate& chat_template, const Request& r) {
  try {
    return RenderChatFields(chat_template, r);
  } catch (const Error& e) {  // (an ApiError is no latent::Error: it passes)
    throw RequestError(e, kChatTemplateFailed, "messages");
  }
}

}  // namespace latent::server
