// The OpenAI protocol as latent serves it: request bodies parsed and validated into plain structs
// (every rejection is an ApiError naming the field), and the JSON of responses, stream chunks and
// errors. Pure functions of their inputs, no I/O: the HTTP layer, the unit tests and the fuzzer
// (tests/fuzz/openai_request_fuzzer.cc) drive them directly.
//
// Besides OpenAI's fields, requests accept vLLM's extensions: top_k, min_p, repetition_penalty,
// ignore_eos, stop_token_ids, min_tokens, allowed_token_ids, skip_special_tokens,
// return_token_ids (the choice's "token_ids"; "prompt_token_ids" in each completions choice and at
// the top of a chat response), stream_options.continuous_usage_stats (every chunk's usage),
// return_tokens_as_token_ids (logprob tokens as "token_id:N"), add_generation_prompt,
// continue_final_message and chat_template_kwargs. logit_bias (token id strings to biases in
// [-100, 100]) is honoured. Fields latent does not know are ignored;
// known ones it cannot honour (echo for chat, best_of other than n, suffix, top_logprobs for
// completions, a response_format type other than text, json_object, json_schema and
// structural_tag) are rejected. response_format json_object, json_schema and vLLM's structural_tag
// (structured/structural_tag.h) constrain the output, and so does vLLM's structured_outputs (json,
// regex, choice, grammar, json_object, structural_tag: structured/output_spec.h; compiled by
// structured/structured_output.h). Chat takes `tools` and
// `tool_choice` (validated in tool_request.h); the model's tool calls come back as
// message.tool_calls / delta.tool_calls through a tool-call parser (tool_call_parser.h).
//
// Scoring (completions): "echo": true puts the prompt's text before each choice's text; with
// "logprobs": N the choice's logprobs then start with the prompt's tokens (the first with null
// logprob and top_logprobs, as OpenAI and vLLM give it; each other's top_logprobs lists the
// prompt token itself, as a generated token's does), and "max_tokens": 0 scores the prompt
// without generating (finish_reason "length"). That is what lm-evaluation-harness's
// local-completions model sends for loglikelihood tasks.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "structured/output_spec.h"
#include <vector>

#include "base/error.h"
#include "base/json_depth.h"
#include "engine/request.h"
#include "server/tool_choice.h"

namespace latent::server {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// A request the server refuses: the HTTP status and OpenAI's error fields.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "")
      : std::runtime_error(message),
        status_(status),
        message_(message),
        param_(std::move(param)),
        code_(std::move(code)) {}
  int status() const { return status_; }
  // The whole message: what() stops at a NUL, which a client's text echoed in it may hold.
  const std::string& message() const { return message_; }
  const std::string& param() const { return param_; }  // The offending field, or "".
  const std::string& code() const { return code_; }    // e.g. "model_not_found", or "".
  // OpenAI's error type for the status: invalid_request_error (4xx), server_error (5xx).
  std::string type() const;

 private:
  int status_;
  std::string message_;
  std::string param_;
  std::string code_;
};

// {"error": {"message", "type", "param", "code"}}; absent param/code are null.
OrderedJson ErrorJson(const ApiError& error);
// The same for a status and message (HTTP-level errors: 404 route, 413 body).
OrderedJson ErrorJson(int status, const std::string& message, const std::string& code = "");

// The error a request is answered with for a latent::Error caught while handling it: bad input is
// 400 invalid_request_error, `context` + the message, naming `param`. An InternalError (a failed
// LATENT_CHECK) is a bug in latent, not the client's: 500 server_error "internal error: " +
// `context` + the message, code internal_error and no param, as for any unexpected exception.
ApiError RequestError(const Error& error, const std::string& context = "", std::string param = "");

// A JSON number with an integral value in int64's range (16.0 counts, as Python clients may
// send one); nullopt for anything else (a fraction, an infinity, a string, a number past int64).
std::optional<int64_t> IntegralNumber(const Json& v);

// A logit_bias key as a token id: an optional '-' and decimal digits without a leading zero (JSON
// keys are strings, so OpenAI's clients send "50256"); nullopt for anything else, "05" and "-0"
// too (one id, one key). The caller checks the range.
std::optional<int64_t> TokenIdKey(std::string_view key);

// A logprob as JSON: a number always. -inf (a token the model rules out) would serialize as
// null, which OpenAI's clients do not expect; vLLM sends -9999.0 for it, as does this.
OrderedJson LogprobValue(float logprob);

// Parses a request body as a JSON object. Rejects invalid JSON, nesting deeper than
// kMaxJsonDepth levels and non-objects with 400.
Json ParseJsonObject(std::string_view body);

// The object `text` parsed again keeping key order (which templates may show, and which orders a
// schema's properties), with only its top-level members named in `keys`: the others are never
// built, not even their nested values. nlohmann's ordered_json finds each key by a linear scan,
// so re-parsing a whole body with an ignored 60k-key object in it took 12 s; the kept members are
// built in time linear in the text too (nlohmann's own builders are quadratic in a long list of
// objects and in a wide object).
OrderedJson ParseOrdered(std::string_view text, std::initializer_list<std::string_view> keys);

enum class Endpoint : uint8_t { kCompletions, kChatCompletions };

// What requests are checked against; fixed for the life of the server.
struct ServingLimits {
  std::string model_name;      // The only name "model" may take.
  int64_t context_tokens = 0;  // max_position_embeddings: prompt + completion at most.
  int64_t cache_tokens = 0;    // Cache capacity in tokens: a request must fit it alone.
  int64_t vocab_size = 0;      // Prompt token ids are below this.
  int32_t max_n = 128;         // Samples per prompt.
  int32_t max_choices = 1024;  // Prompts x n per request.
  int32_t max_stop = 16;       // Stop strings per request.
  size_t max_stop_bytes = 1024;
  // generation_config.json's sampling fields (model::SamplingDefaults::AsFields, checked when
  // read by SamplingDefaults::Check), as vLLM's default_sampling_params under its default
  // --generation-config auto: each fills the field a request leaves out or null (temperature,
  // top_p, top_k, min_p, repetition_penalty); "max_tokens" caps the default max_tokens of a chat
  // completion and of a completion that sends "max_tokens": null (the rest of the context), not
  // a completion's that leaves it out (16, as vLLM's CompletionRequest).
  Json sampling_defaults = Json::object();
};

// The fields of `defaults` (ServingLimits::sampling_defaults) that `request` leaves out, absent
// or null, as an object: vLLM's to_sampling_params takes a request's value, else the default.
// Never max_tokens, whose default each front sets itself. The server and request lines (latent
// generate, LLM) merge these, so one rule fills both. A template for their two JSON types
// (Json, request lines' ordered one).
template <typename AnyJson>
AnyJson SamplingDefaultsLeftOut(const AnyJson& defaults, const AnyJson& request) {
  AnyJson left_out = AnyJson::object();
  for (const auto& [key, value] : defaults.items()) {
    if (key == "max_tokens") continue;
    const auto given = request.find(key);
    if (given == request.end() || given->is_null()) left_out[key] = value;
  }
  return left_out;
}

// One prompt of a completions request: text to tokenize, or token ids.
struct PromptSpec {
  bool is_text = false;
  std::string text;
  std::vector<int32_t> ids;
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::vector<PromptSpec> prompts;    // Completions: one or more prompts.
  OrderedJson messages;               // Chat: the conversation, content parts flattened.
  OrderedJson tools;                  // Chat: null or the tools array, for the template.
  ToolChoice tool_choice;             // Chat: tools/tool_choice (tool_request.h).
  // Chat: false keeps only the model's first tool call (vLLM's maybe_filter_parallel_tool_calls).
  bool parallel_tool_calls = true;
  OrderedJson chat_template_kwargs;   // Chat: null or an object of template variables.
  bool add_generation_prompt = true;  // Chat.
  // Chat: the prompt ends inside the final (assistant) message, for the model to continue it.
  bool continue_final_message = false;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage.
  // stream_options.continuous_usage_stats, with include_usage (as vLLM): every chunk's usage.
  bool continuous_usage = false;
  // nullopt: the rest of the context (capped by generation_config's max_new_tokens), or 16 for
  // a completion that leaves the field out; 0 only with echo (score the prompt).
  std::optional<int64_t> max_tokens;
  // A completion's "max_tokens": null, which vLLM passes to get_max_tokens as None (the default
  // above without the 16), where leaving it out is CompletionRequest's 16.
  bool max_tokens_null = false;
  // vLLM's min_tokens: EOS and stop_token_ids are held off, and stop strings not matched, until
  // this many tokens are generated (engine::Request::min_tokens); at most the resolved max_tokens.
  int64_t min_tokens = 0;
  engine::SamplingParams sampling;    // temperature defaults to 1, as OpenAI's does.
  std::vector<std::string> stop;      // Stop strings, matched on the output text.
  bool include_stop_str_in_output = false;  // vLLM's: the text ends after the stop string
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;     // Per-token logprobs in the response.
  int32_t top_logprobs = 0;  // Alternatives per token with logprobs.
  bool echo = false;         // Completions: the prompt before each choice (with logprobs: its
                             // tokens' logprobs too).
  // vLLM's prompt_logprobs: -1 none; k: each prompt token's logprob and rank with its k best
  // alternatives (PromptLogprobsJson). Not with stream. A completion with echo and logprobs that
  // leaves it out gets the logprobs' k, as vLLM's.
  int32_t prompt_logprobs = -1;
  // vLLM's truncate_prompt_tokens: keep the prompt's last k tokens; -1: as many as the context
  // leaves beside max_tokens; nullopt: off (MakeEngineRequest).
  std::optional<int64_t> truncate_prompt_tokens;
  bool skip_special_tokens = true;
  bool return_token_ids = false;
  // vLLM's: each logprob's token (and top_logprobs' keys or tokens) is "token_id:N", which a
  // client maps back exactly where a token is no whole character.
  bool return_tokens_as_token_ids = false;
  std::string user;
  // What the output is constrained to (structured output), from response_format or
  // structured_outputs: output_field names which, for errors.
  structured::OutputSpec output;
  const char* output_field = "response_format";

  int32_t num_prompts() const {
    return endpoint == Endpoint::kChatCompletions ? 1 : static_cast<int32_t>(prompts.size());
  }
  int32_t num_choices() const { return num_prompts() * sampling.n; }
};

// Parses and validates a /v1/completions or /v1/chat/completions body. Throws ApiError: 400 for
// malformed JSON, wrong types and values out of range, 404 for a model other than
// limits.model_name.
GenerationRequest ParseGenerationRequest(std::string_view body, Endpoint endpoint,
                                         const ServingLimits& limits);

// The engine request for one tokenized prompt, with max_tokens resolved (the default, and a check
// that prompt + completion fits the context and the cache) and, for echo with logprobs, prompt
// logprobs asked for. Throws ApiError 400.
engine::Request MakeEngineRequest(const GenerationRequest& request, std::vector<int32_t> prompt,
                                  const ServingLimits& limits);

// POST /tokenize: {"prompt": text, "add_special_tokens": true} or {"messages": [...],
// "add_generation_prompt": true, "continue_final_message": false, "add_special_tokens": false}
// (vLLM's shape).
struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string prompt;
  OrderedJson messages;
  OrderedJson tools;
  OrderedJson chat_template_kwargs;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = true;
  bool return_token_strs = false;
};
TokenizeRequest ParseTokenizeRequest(std::string_view body, const ServingLimits& limits);

// POST /detokenize: {"tokens": [ids]}.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
DetokenizeRequest ParseDetokenizeRequest(std::string_view body, const ServingLimits& limits);

// ---- Responses ----

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // Prompt tokens served from the prefix cache.
};
// `details`: with prompt_tokens_details (cached_tokens).
OrderedJson UsageJson(const Usage& usage, bool details = true);

// The logprob of one generated (or, with echo, prompt) token and its best alternatives.
struct LogprobEntry {
  std::string token;  // The token's text, or "token_id:N" (return_tokens_as_token_ids).
  // Chat's "bytes" where they are not token's: the token's text under
  // return_tokens_as_token_ids (vLLM gives the sampled token's text bytes, an alternative's the
  // bytes of its "token_id:N").
  std::optional<std::string> bytes;
  float logprob = 0;
  bool null_logprob = false;  // An echoed prompt's first token: logprob and top_logprobs null.
  // Best first. Completions' top_logprobs put the token itself before these; chat's do not.
  std::vector<std::pair<std::string, float>> top;
  // Completions: where the token's text starts in the choice's text, in characters (code
  // points: vLLM's len() of a Python str, OpenAI's count).
  int64_t text_offset = 0;
};

// One tool call of a chat choice: whole (a response), or the part new since the last chunk (a
// stream: id and name only in the call's first chunk).
struct ToolCallOutput {
  int32_t index = 0;
  std::string id;
  std::string name;
  std::string arguments;  // JSON text.
};

// A choice, whole (a response) or the part new since the last chunk (a stream).
struct ChoiceOutput {
  int32_t index = 0;
  std::string text;
  std::vector<int32_t> token_ids;  // With return_token_ids.
  std::vector<LogprobEntry> logprobs;
  std::string finish_reason;  // "" while running: null in JSON.
  // vLLM's stop_reason (not OpenAI's), beside finish_reason: the stop string that ended the
  // choice, else the stop_token_ids entry (a JSON int), else null (EOS, length, abort). In every
  // response choice and completions chunk; in chat chunks only the one with the finish_reason
  // (vLLM leaves it unset in the others).
  OrderedJson stop_reason;
  // Chat with a reasoning parser: message.reasoning_content (null when empty) /
  // delta.reasoning_content (only when not empty).
  std::string reasoning;
  // Chat with a tool-call parser: message.tool_calls (then content is null when empty, as it is
  // under a reasoning parser) / delta.tool_calls.
  std::vector<ToolCallOutput> tool_calls;
  // With return_token_ids, where vLLM puts them: completions, the choice's "prompt_token_ids" (its
  // prompt's); chat, the response's top-level one (from the first choice). A stream carries them
  // in each choice's first chunk only (chat: its opening chunk, top level); empty: left out.
  std::vector<int32_t> prompt_token_ids;
  // vLLM's continuous_usage_stats: this chunk's "usage" (its prompt's tokens and the choice's
  // completion tokens so far, no prompt_tokens_details) instead of null. Streams only.
  std::optional<Usage> usage;
  // With prompt_logprobs (PromptLogprobsJson): completions, the choice's "prompt_logprobs"; chat,
  // the response's top-level one (from the first choice). Null: left out.
  OrderedJson prompt_logprobs;
};

// One entry of vLLM's prompt_logprobs: a token id with its logprob, rank and text.
struct RankedLogprob {
  int32_t token = 0;
  float logprob = 0;
  int64_t rank = 0;                    // 1: the most likely token.
  std::optional<std::string> decoded;  // Its text; null without a tokenizer.
};
// vLLM's prompt_logprobs: null for the first prompt token (nothing comes before it), then for
// each later one {"<id>": {"logprob", "rank", "decoded_token"}, ...}: the token itself first,
// then its best alternatives. `positions[i]` lists prompt token i + 1's.
OrderedJson PromptLogprobsJson(const std::vector<std::vector<RankedLogprob>>& positions);

// What every response and chunk of one request shares.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  bool logprobs = false;
  bool return_token_ids = false;
  bool include_usage = false;  // Streams: every chunk carries "usage": null, then a usage chunk.
  bool reasoning = false;      // Chat messages carry "reasoning_content" (a reasoning parser runs).
  // tool_choice "required" or a named function: message.content is "" beside the calls, not
  // null (vLLM's `content or ""` for forced calls).
  bool forced_tool_call = false;
};

// The non-streaming response.
OrderedJson ResponseJson(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices,
                         const Usage& usage);
// A stream chunk with one choice. `role_only`: chat's opening chunk (delta {"role": "assistant",
// "content": ""}).
OrderedJson ChunkJson(const ResponseMeta& meta, const ChoiceOutput& choice, bool role_only = false);
// The last chunk of a stream with include_usage: no choices, the usage.
OrderedJson UsageChunkJson(const ResponseMeta& meta, const Usage& usage);

// GET /v1/models.
OrderedJson ModelsJson(const std::string& model_name, int64_t created, int64_t context_tokens);

// "data: <json>\n\n"; invalid UTF-8 (never expected) is replaced, not thrown.
std::string SseData(const OrderedJson& json);
// The JSON text of a response body, with the same replacement.
std::string Dump(const OrderedJson& json);

}  // namespace latent::server
