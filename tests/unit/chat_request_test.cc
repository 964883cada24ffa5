// ParseChatFields: a chat's fields checked and shaped once for the server, request lines and
// Python (server/chat_request.h), each refusal an ApiError naming the field.
#include "server/chat_request.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

namespace latent::server {
namespace {

ChatFields ParseChat(const std::string& text) {
  return ParseChatFields(Json::parse(text), OrderedJson::parse(text));
}

// The ApiError `text` raises: its param, code and message.
std::tuple<std::string, std::string, std::string> Refusal(const std::string& text) {
  try {
    ParseChat(text);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << text;
    return {e.param(), e.code(), e.what()};
  }
  ADD_FAILURE() << text << " was taken";
  return {};
}

TEST(ChatRequestTest, MessagesAreShapedAsTheServerSendsThemToTheTemplate) {
  const ChatFields chat = ParseChat(R"({"messages": [
      {"role": "developer", "content": "be brief", "z": 1, "a": 2},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null}]})");
  EXPECT_EQ(chat.messages[0]["role"], "system");  // OpenAI's newer name, which templates lack
  EXPECT_EQ(chat.messages[0].dump(), R"({"role":"system","content":"be brief","z":1,"a":2})");
  EXPECT_EQ(chat.messages[1]["content"], "a\nb");  // text parts joined, as vLLM joins them
  EXPECT_TRUE(chat.messages[2]["content"].is_null());
  EXPECT_TRUE(chat.tools.is_null());
  EXPECT_TRUE(chat.chat_template_kwargs.is_null());
  EXPECT_TRUE(chat.add_generation_prompt);
  EXPECT_FALSE(chat.continue_final_message);
}

TEST(ChatRequestTest, ThePromptEndDefaultsAsVllms) {
  const std::string messages = R"("messages": [{"role": "user", "content": "hi"}])";
  const ChatFields cont = ParseChat("{" + messages + R"(, "continue_final_message": true})");
  EXPECT_TRUE(cont.continue_final_message);
  EXPECT_FALSE(cont.add_generation_prompt);  // off when continuing, unless set
  const ChatFields off = ParseChat("{" + messages + R"(, "add_generation_prompt": false,
      "chat_template_kwargs": {"b": 1, "a": 2}, "tools": null})");
  EXPECT_FALSE(off.add_generation_prompt);
  EXPECT_EQ(off.chat_template_kwargs.dump(), R"({"b":1,"a":2})");  // key order kept
  // The template kwargs' add_generation_prompt wins, as vLLM updates apply_chat_template's
  // arguments with them.
  EXPECT_FALSE(ParseChat("{" + messages + R"(, "add_generation_prompt": true,
      "chat_template_kwargs": {"add_generation_prompt": false}})").add_generation_prompt);
  EXPECT_FALSE(ParseChat("{" + messages + R"(, "continue_final_message": true,
      "chat_template_kwargs": {"add_generation_prompt": false}})").add_generation_prompt);
  EXPECT_EQ(std::get<2>(Refusal("{" + messages +
                                R"(, "chat_template_kwargs": {"add_generation_prompt": 1}})")),
            "'chat_template_kwargs.add_generation_prompt' must be a boolean");
  EXPECT_EQ(Refusal("{" + messages +
                    R"(, "continue_final_message": true, "add_generation_prompt": true})"),
            std::make_tuple(std::string("continue_final_message"), std::string("invalid_value"),
                            std::string("'continue_final_message' and 'add_generation_prompt' "
                                        "cannot both be true: one continues the final message, "
                                        "the other starts a new assistant message")));
}

TEST(ChatRequestTest, EachRefusalNamesTheField) {
  const std::string hi = R"({"role": "user", "content": "hi"})";
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"{}", "messages", "missing_required_parameter"},
      {R"({"messages": "hi"})", "messages", "invalid_type"},
      {R"({"messages": []})", "messages", "invalid_value"},
      {R"({"messages": [1]})", "messages[0]", "invalid_type"},
      {R"({"messages": [)" + hi + R"(, {"content": "x"}]})", "messages[1].role", "invalid_type"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content", "invalid_type"},
      // A content part's errors name the part.
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
          {"type": "image_url", "image_url": {"url": "x"}}]}]})",
       "messages[0].content[1].type", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": [{"type": 5}]}]})",
       "messages[0].content[0].type", "invalid_type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       "messages[0].content[0].text", "missing_required_parameter"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]})",
       "messages[0].content[0].text", "invalid_type"},
      {R"({"messages": [{"role": "user", "content": ["hi"]}]})", "messages[0].content[0]",
       "invalid_type"},
      {R"({"messages": [)" + hi + R"(], "chat_template_kwargs": [1]})", "chat_template_kwargs",
       "invalid_type"},
      {R"({"messages": [)" + hi + R"(], "tools": [5]})", "tools[0]", "invalid_type"},
      {R"({"messages": [)" + hi + R"(], "add_generation_prompt": "yes"})", "add_generation_prompt",
       "invalid_type"},
      {R"({"messages": [)" + hi + R"(], "continue_final_message": 1})", "continue_final_message",
       "invalid_type"},
      // The template kwargs' add_generation_prompt, which wins (as in vLLM), as its own field
      // (it failed at render: a 400 naming "messages", no code). With continue_final_message:
      // the top-level pair's 400.
      {R"({"messages": [)" + hi + R"(], "chat_template_kwargs": {"add_generation_prompt": "yes"}})",
       "chat_template_kwargs.add_generation_prompt", "invalid_type"},
      {R"({"messages": [)" + hi + R"(], "chat_template_kwargs": {"add_generation_prompt": null}})",
       "chat_template_kwargs.add_generation_prompt", "invalid_type"},
      {R"({"messages": [)" + hi + R"(], "continue_final_message": true,
          "chat_template_kwargs": {"add_generation_prompt": true}})",
       "continue_final_message", "invalid_value"},
      // Both true at the top level, as vLLM's validator refuses it, whatever the kwargs say.
      {R"({"messages": [)" + hi + R"(], "continue_final_message": true,
          "add_generation_prompt": true,
          "chat_template_kwargs": {"add_generation_prompt": false}})",
       "continue_final_message", "invalid_value"},
  };
  for (const auto& [text, param, code] : cases) {
    const auto [got_param, got_code, message] = Refusal(text);
    EXPECT_EQ(got_param, param) << text << ": " << message;
    EXPECT_EQ(got_code, code) << text << ": " << message;
  }
}

// TakeChatFields moves every chat field into a request of either endpoint that takes a chat.
TEST(ChatRequestTest, TakeChatFieldsFillsBothEndpointsRequests) {
  const std::string text = R"({"messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "f"}}],
      "chat_template_kwargs": {"thinking": true}, "add_generation_prompt": false,
      "continue_final_message": true})";
  const ChatFields chat = ParseChat(text);
  GenerationRequest generation;
  TokenizeRequest tokenize;
  TakeChatFields(chat, generation);
  TakeChatFields(chat, tokenize);
  for (const auto& [messages, tools, kwargs, add_prompt, continue_final] :
       {std::tie(generation.messages, generation.tools, generation.chat_template_kwargs,
                 generation.add_generation_prompt, generation.continue_final_message),
        std::tie(tokenize.messages, tokenize.tools, tokenize.chat_template_kwargs,
                 tokenize.add_generation_prompt, tokenize.continue_final_message)}) {
    EXPECT_EQ(messages, chat.messages);
    EXPECT_EQ(tools, chat.tools);
    EXPECT_EQ(kwargs, chat.chat_template_kwargs);
    EXPECT_FALSE(add_prompt);
    EXPECT_TRUE(continue_final);
  }
}

}  // namespace
}  // namespace latent::server
