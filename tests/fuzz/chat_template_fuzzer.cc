// Fuzzes the chat template interpreter: parses the input as a template and, if it parses, renders
// it with a fixed small conversation (system, user, assistant with tool calls, tool output) and a
// tool list. Bad templates must fail with latent::Error only; anything else (another exception, a
// crash, a sanitizer report, a hang past the bounds) is a bug.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "tokenizer/chat_template/chat_template.h"

namespace {

const nlohmann::ordered_json& Messages() {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris? <think>x</think> é 東京"},
    {"role": "assistant", "content": "", "reasoning_content": "need a tool",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                    {"id": "c2", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Lyon", "n": 2}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 18.5}"},
    {"role": "user", "content": [{"type": "text", "text": "thanks"}, {"type": "image"}]}
  ])");
  return messages;
}

const nlohmann::ordered_json& Tools() {
  static const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                    "n": {"type": "integer", "default": null}}, "required": ["city"]}}}
  ])");
  return tools;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string source(reinterpret_cast<const char*>(data), size);
  latent::tokenizer::ChatTemplate chat;
  try {
    chat = latent::tokenizer::ChatTemplate::FromString(
        source, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  } catch (const latent::Error&) {
    return 0;
  }
  // Small bounds keep each run quick; the bounds themselves are part of what is tested.
  latent::tokenizer::ChatTemplateLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_loop_iterations = 20000;
  limits.max_call_depth = 20;
  limits.max_work = 1 << 24;
  chat.set_limits(limits);
  try {
    chat.Render(Messages(), Tools(), true, {{"enable_thinking", true}});
  } catch (const latent::Error&) {
  }
  return 0;
}
