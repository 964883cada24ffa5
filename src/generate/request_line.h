// One generation request as a JSON object, the line format of `latent generate --prompts`
// (documented in src/cli/batch_generate.cc); the Python module builds the same objects, so both
// fronts parse, tokenize and validate requests with one piece of code.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "structured/output_spec.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace latent::generate {

// A request line's JSON, its keys in the line's order: a structured_outputs schema's property
// order is the order of the generated object's properties.
using RequestJson = nlohmann::ordered_json;

// The tokenizer and chat template of a checkpoint, loaded on first use: only text and chat
// prompts need them. Not thread-safe while loading; call Tokenizer()/Template() once up front
// when several threads share it.
class TextTools {
 public:
  explicit TextTools(std::string dir) : dir_(std::move(dir)) {}
  const tokenizer::Tokenizer& Tokenizer();
  // The chat template, probed on load for how it reads tool-call turns, as the server's
  // (server/tool_template.h).
  const tokenizer::ChatTemplate& Template();
  bool has_tokenizer() const { return tokenizer_ != nullptr; }

 private:
  std::string dir_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::ChatTemplate> template_;
};

struct RequestLine {
  engine::Request request;
  int64_t arrival_step = 0;        // Submit when the engine reaches this step (tests).
  int64_t cancel_step = -1;        // Cancel when the engine reaches this step (tests).
  std::vector<std::string> stop;   // Stop strings, matched on the detokenized text.
  bool include_stop = false;       // include_stop_str_in_output: the text ends after the stop
  // "structured_outputs" (vLLM's object: json, regex, choice, grammar, json_object or
  // structural_tag): compiled by whoever submits the request (RequestJob::SetConstraint), which
  // needs the model's vocabulary.
  structured::OutputSpec output;
  bool skip_special_tokens = true; // The samples' text leaves special tokens out (the server's).
  // vLLM's truncate_prompt_tokens (-1 or k >= 1), not yet applied: it needs the model's context
  // (engine::TruncatePrompt; latent.LLM applies it, `latent generate` refuses it).
  std::optional<int64_t> truncate_prompt_tokens;
  std::string chat_prompt;  // A "messages" line's prompt as the chat template rendered it.
};

// A request line's text parsed: a latent::Error when it nests deeper than
// tokenizer::kMaxChatJsonDepth (its messages are copied on their way to the chat template, and
// nlohmann's copies recurse once per level), nlohmann's exception when it is not JSON, and
// tokenizer::JsonIntegerRangeError (a latent::Error naming where) for an integer past the 64-bit
// range in its messages, tools or chat_template_kwargs.
RequestJson ParseRequestLineJson(std::string_view text);

// A line's sampling fields (temperature, top_k, top_p, min_p, the penalties, seed, logprobs, n,
// logit_bias, allowed_token_ids; temperature 0 when absent), checked as the server checks them
// (engine/request_fields.h: the float fields on their doubles, seed -1 as none, logprobs in
// [0, 20] when given, n > 1 refused with temperature 0) and as the engine does
// (SamplingParams::Validate; token ids for sign only): latent::Error naming the field otherwise.
engine::SamplingParams ParseSamplingFields(const RequestJson& line);

// A line's "prompt_logprobs" (-1 when absent or null), checked as the server checks it
// (engine::LogprobsCountError: a -1 given is refused). Separate from ParseSamplingFields: it is
// the request's, not a sample's (engine::Request, not SamplingParams).
int32_t ParsePromptLogprobs(const RequestJson& line);

// A line's fields besides the sampling ones and the prompt, checked where there is no prompt yet
// (the Python SamplingParams, when made): their types; max_tokens >= 0 and 0 <= min_tokens <=
// max_tokens (engine::ValidateTokenCounts, min_tokens against no bound when max_tokens is
// absent); stop strings not empty; stop token ids not negative (the vocabulary's bound is
// Engine::Submit's); truncate_prompt_tokens -1 or positive; ignore_eos,
// include_stop_str_in_output and skip_special_tokens booleans. latent::Error naming the field
// otherwise, as ParseRequestLine and Engine::Submit would.
void CheckFieldsWithoutPrompt(const RequestJson& line);

// Throws latent::Error naming the field that is wrong (nlohmann's exceptions for bad JSON).
// `default_max_tokens` and `default_ignore_eos` apply to a line that does not say (`latent
// generate --max-tokens, --ignore-eos`); so do `sampling_defaults`' fields (generation_config's,
// model::SamplingDefaults::AsFields, as the server applies them; "max_tokens" is left to
// `default_max_tokens`) to a line that leaves them out or null.
RequestLine ParseRequestLine(const RequestJson& line, TextTools& text, int64_t default_max_tokens,
                             bool default_ignore_eos = false,
                             const RequestJson& sampling_defaults = RequestJson::object());

// A "messages" line's prompt text: its chat fields ("messages", "tools", "chat_template_kwargs",
// "add_generation_prompt", "continue_final_message") checked and shaped as the server's
// (server::ParseChatFields: "developer" is "system", text parts are joined; tool-call turns as
// server::ShapeForTemplate shapes them), then rendered by the chat template. latent::Error
// with the server's message otherwise (the template's prefixed as the server's 400 is).
std::string RenderChatLine(const RequestJson& line, TextTools& text);

// The prompt token ids of a request line: "ids", "prompt" (text, encoded with special tokens as
// transformers' tokenizer(text) does) or "messages" (RenderChatLine, then encoded without adding
// special tokens: the template writes them). `chat_prompt`, when given, gets a "messages" line's
// rendered text.
std::vector<int32_t> PromptIds(const RequestJson& line, TextTools& text,
                               std::string* chat_prompt = nullptr);

}  // namespace latent::generate
