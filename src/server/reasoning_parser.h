// Reasoning output (`latent serve --reasoning-parser`): thinking models write their reasoning
// between <think> and </think>, then the answer. ThinkParser sends the text inside to
// ParsedDelta::reasoning and the rest to ParsedDelta::content, incrementally.
//
// Where the output starts differs per chat template, so it is decided per request:
// - "deepseek_r1" (vLLM's deepseek_r1): the output starts inside the reasoning (R1's template
//   ends the prompt with "<think>\n"; older R1 outputs repeat the <think> themselves), unless
//   the prompt closed it (ends with </think>, as Qwen3's with enable_thinking=false): content.
// - "kimi_k2" (vLLM's kimi_k2): starts as deepseek_r1 does (Kimi's templates end the prompt with
//   the assistant tag, and vLLM's parser starts inside the reasoning); the start of a tool-call
//   section (<|tool_calls_section_begin|> or <|tool_call_section_begin|>) ends the reasoning as
//   </think> does, and is kept as content for the tool parser. A request whose
//   chat_template_kwargs turn "thinking" off (Python's truth, as vLLM's bool(): false, null, 0,
//   "", [] and {} are off; left out is on; "enable_thinking" is not read) has no reasoning: vLLM
//   then parses with its identity parser, so all of the output is content, markers included,
//   and a grammar applies from the first token.
// - "think" (and its aliases deepseek_v3, glm45): from the end of the rendered prompt.
//   <think> (DeepSeek V3.1 with thinking=true): inside the reasoning. </think> (V3.1 without
//   thinking, GLM-4.5 with enable_thinking=false): the template closed the reasoning, so all the
//   output is content. Otherwise the model may open the reasoning itself (GLM-4.5, Kimi K2
//   thinking).
// Unless the prompt closed it, a <think> at the very start of the output (after whitespace only)
// opens the reasoning and is dropped with that whitespace; the first </think> closes it for good
// (later markers are content, as vLLM does). An output that never closes its reasoning is all
// reasoning. vLLM's non-streamed extract_reasoning drops whatever precedes the first <think>,
// wherever it is, while its streamed deltas send that text on (as content, or as reasoning for
// deepseek_r1); a stream cannot take back text it sent, so here a <think> after other text is
// text, streamed or not, and the two always agree. Leading whitespace alone is dropped as vLLM's
// non-streamed split drops it.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/output_parser.h"

namespace latent::server {

// Where a ThinkParser's output starts.
enum class ThinkStart { kReasoning, kMayOpen, kContent };

class ThinkParser : public OutputParser {
 public:
  // `content_starts`: markers that also end the reasoning, unlike </think> kept as the start of
  // the content (Kimi K2's tool-call section, for the tool parser).
  explicit ThinkParser(ThinkStart start, std::vector<std::string_view> content_starts = {});
  ParsedDelta Push(std::string_view text) override;
  ParsedDelta Finish() override;

 private:
  enum class State { kStart, kReasoning, kContent };
  State state_ = State::kStart;
  bool starts_in_reasoning_;  // In kStart: where text that is not <think> goes.
  std::vector<std::string_view> content_starts_;
  // Text not yet assigned: at the start, leading whitespace and a possible partial <think>; in
  // the reasoning, a possible partial </think> (or content start).
  std::string held_;
};

// The names --reasoning-parser accepts besides "auto" and "none", for --help and errors.
const char* ReasoningParserNames();

// Resolves --reasoning-parser: "none", a parser name, or "auto", which picks "think" when the chat
// template mentions </think> and none otherwise (`template_mentions_think`). Returns "" for none;
// throws latent::Error naming an unknown parser.
std::string ResolveReasoningParser(const std::string& flag, bool template_mentions_think);

// The final message a continue_final_message prompt leaves open for the output to go on with.
struct ContinuedMessage {
  std::string role;
  std::string text;  // its text as the request gave it (the server joins a list's text parts)
};

// A fresh parser for one choice of one request, given the resolved name ("" gives null) and the
// rendered prompt, as the header describes. With `continued`, the output goes on with that
// message rather than starting a reply, so only the message decides (never markers in the system
// prompt or the history): another role's message is content; the last marker in the message's
// text decides (a continued "<think>Let me" is reasoning); without one, a marker the template
// wrote right before the text (Qwen3's empty <think></think>), else content (mid-message, the
// model opens no block). An empty text is a fresh reply, decided as above. `template_kwargs`:
// the request's chat_template_kwargs (null or an object), for kimi_k2's "thinking" switch, which
// decides before all of that.
std::unique_ptr<OutputParser> MakeReasoningParser(
    const std::string& name, std::string_view rendered_prompt,
    const ContinuedMessage* continued = nullptr,
    const nlohmann::ordered_json* template_kwargs = nullptr);

// Where MakeReasoningParser's parser starts for this request (the rule above); nullopt for none.
// Structured output applies its grammar only after the reasoning unless this is kContent; with
// kMayOpen, only when the first token is <think> (AfterReasoning).
std::optional<ThinkStart> ReasoningStart(
    const std::string& name, std::string_view rendered_prompt,
    const ContinuedMessage* continued = nullptr,
    const nlohmann::ordered_json* template_kwargs = nullptr);

// The text that closes the reasoning ("</think>"), whose token id starts a grammar.
std::string_view ReasoningEndMarker();
// The text that opens it ("<think>"): where the model may open the reasoning (kMayOpen), a first
// token with its id makes a grammar wait for the end.
std::string_view ReasoningStartMarker();

}  // namespace latent::server
