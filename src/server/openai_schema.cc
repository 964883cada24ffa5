#include "server/openai_schema.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_depth.h"
#include "base/saturating.h"
#include "engine/request_fields.h"
#include "engine/sampling_params.h"
#include "server/chat_request.h"
#include "server/field_errors.h"
#include "server/tool_request.h"
#include "structured/structural_tag.h"
#include "tokenizer/chat_template/exact_json.h"

namespace latent::server {
namespace {

// An integer (IntegralNumber).
std::optional<int64_t> GetInt(const Json& object, const char* key) {
  const Json* v = Find(object, key);
  if (!v) return std::nullopt;
  if (const std::optional<int64_t> i = IntegralNumber(*v)) return i;
  if (v->is_number_unsigned()) BadField(key, StrCat("'", key, "' is too large"));
  WrongType(key, "an integer");
}

std::optional<double> GetNumber(const Json& object, const char* key) {
  const Json* v = Find(object, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) WrongType(key, "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) BadField(key, StrCat("'", key, "' must be finite"));
  return d;
}

std::optional<std::string> GetString(const Json& object, const char* key) {
  const Json* v = Find(object, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) WrongType(key, "a string");
  return v->get<std::string>();
}

void CheckModel(const Json& body, const ServingLimits& limits, std::string* model) {
  const std::optional<std::string> name = GetString(body, "model");
  if (!name) return;
  if (*name != limits.model_name) {
    throw ApiError(404,
                   StrCat("The model '", *name, "' does not exist; this server serves '",
                          limits.model_name, "'"),
                   "model", "model_not_found");
  }
  *model = *name;
}

std::vector<int32_t> TokenIds(const Json& array, const std::string& field,
                              const ServingLimits& limits) {
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (const Json& v : array) {
    if (!v.is_number_integer()) WrongType(field, "a list of integer token ids");
    const bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
    const uint64_t id = negative ? 0 : v.get<uint64_t>();
    if (negative || (limits.vocab_size > 0 && id >= static_cast<uint64_t>(limits.vocab_size)) ||
        id > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      BadField(field, StrCat("token id ", v.dump(), " in '", field,
                             "' is outside the vocabulary (size ", limits.vocab_size, ")"));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<PromptSpec> ParsePrompt(const Json& body, const ServingLimits& limits) {
  const Json* prompt = Find(body, "prompt");
  if (!prompt) BadField("prompt", "'prompt' is required", "missing_required_parameter");
  auto empty = [] { BadField("prompt", "the prompt is empty"); };
  std::vector<PromptSpec> prompts;
  if (prompt->is_string()) {
    if (prompt->get_ref<const std::string&>().empty()) empty();
    prompts.push_back({true, prompt->get<std::string>(), {}});
    return prompts;
  }
  if (!prompt->is_array()) {
    WrongType("prompt",
              "a string, a list of strings, or a list of token ids (or of lists of them)");
  }
  if (prompt->empty()) empty();
  const Json& first = prompt->front();
  if (first.is_number()) {  // One prompt of token ids.
    prompts.push_back({false, "", TokenIds(*prompt, "prompt", limits)});
    return prompts;
  }
  for (const Json& item : *prompt) {
    if (first.is_string() && item.is_string()) {
      if (item.get_ref<const std::string&>().empty()) empty();
      prompts.push_back({true, item.get<std::string>(), {}});
    } else if (first.is_array() && item.is_array()) {
      if (item.empty()) empty();
      prompts.push_back({false, "", TokenIds(item, "prompt", limits)});
    } else {
      WrongType("prompt",
                "a string, a list of strings, or a list of token ids (or of lists of them)");
    }
  }
  return prompts;
}

// The chat fields shared by /v1/chat/completions and /tokenize (chat_request.h).
// The chat members are parsed again keeping key order, and their integers exact: one past the
// 64-bit range is refused rather than reaching the template as a float (exact_json.h).
ChatFields ParseChat(const Json& body, std::string_view text) {
  OrderedJson ordered;
  try {
    ordered = tokenizer::ParseJsonExactIntegers(text, {"messages", "tools", "chat_template_kwargs"},
                                                {"messages", "tools", "chat_template_kwargs"});
  } catch (const tokenizer::JsonIntegerRangeError& e) {
    BadField(e.path(), e.what());
  }
  return ParseChatFields(body, ordered);
}

// Rejects fields whose meaning latent cannot honour, rather than silently ignoring them.
void RejectUnsupported(const Json& body, Endpoint endpoint, int32_t n) {
  if (endpoint == Endpoint::kChatCompletions && GetBool(body, "echo", false)) {
    BadField("echo", "'echo' is not supported for chat completions", "unsupported_parameter");
  }
  if (const std::optional<int64_t> best_of = GetInt(body, "best_of"); best_of && *best_of != n) {
    BadField("best_of", "'best_of' other than n is not supported", "unsupported_parameter");
  }
  // vLLM's fields for what latent does not implement.
  if (GetBool(body, "use_beam_search", false)) {
    BadField("use_beam_search", "'use_beam_search' is not supported: latent has no beam search",
             "unsupported_parameter");
  }
  if (const Json* words = Find(body, "bad_words")) {
    if (!words->is_array()) WrongType("bad_words", "a list of strings");
    if (!words->empty()) {
      BadField("bad_words", "'bad_words' is not supported (allowed_token_ids and logit_bias are)",
               "unsupported_parameter");
    }
  }
  if (const std::optional<int64_t> priority = GetInt(body, "priority"); priority && *priority) {
    BadField("priority",
             "'priority' other than 0 is not supported: latent serves requests in arrival order",
             "unsupported_parameter");
  }
  if (endpoint == Endpoint::kCompletions && Find(body, "suffix")) {
    BadField("suffix", "'suffix' is not supported", "unsupported_parameter");
  }
  // Completions give alternatives with the integer 'logprobs'; a top_logprobs there would be
  // ignored (OpenAI's completions API has no such field).
  if (endpoint == Endpoint::kCompletions && Find(body, "top_logprobs")) {
    BadField("top_logprobs",
             "'top_logprobs' is for chat completions; completions take the number of "
             "alternatives in the integer 'logprobs'",
             "unsupported_parameter");
  }
}

// response_format: {"type": "text"}, {"type": "json_object"}, {"type": "json_schema",
// "json_schema": {"name": ..., "schema": {...}, "strict": ...}} (the name and strict change
// nothing: the output always fits the schema) or vLLM's {"type": "structural_tag", ...} (either
// form: structured/structural_tag.h). The schema is kept with its keys in the request's
// order (they order the generated object's properties); whether the grammar can enforce it is
// checked when it is compiled.
void ParseResponseFormat(const Json& body, std::string_view text, structured::OutputSpec& out) {
  const Json* format = Find(body, "response_format");
  if (format == nullptr) return;
  if (!format->is_object()) WrongType("response_format", "an object");
  const std::optional<std::string> type = GetString(*format, "type");
  if (!type) BadField("response_format", "'response_format' needs a 'type'");
  if (*type == "text") return;
  if (*type == "json_object") {
    out.kind = structured::OutputSpec::Kind::kJsonObject;
    return;
  }
  if (*type == "structural_tag") {
    out.kind = structured::OutputSpec::Kind::kStructuralTag;
    try {
      out.schema = structured::ParseStructuralTag(
          ParseOrdered(text, {"response_format"})["response_format"], "response_format");
    } catch (const InternalError&) {
      throw;  // a bug in latent (a 500), not a bad field
    } catch (const Error& e) {
      BadField("response_format", e.what());
    }
    return;
  }
  if (*type != "json_schema") {
    BadField("response_format",
             StrCat("response_format type '", *type,
                    "' is not supported (text, json_object, json_schema or structural_tag)"),
             "unsupported_parameter");
  }
  const Json* spec = Find(*format, "json_schema");
  if (spec == nullptr) BadField("response_format", "response_format type 'json_schema' needs a 'json_schema' object");
  if (!spec->is_object()) WrongType("response_format.json_schema", "an object");
  if (const Json* name = Find(*spec, "name"); name && !name->is_string()) {
    WrongType("response_format.json_schema.name", "a string");
  }
  if (const Json* strict = Find(*spec, "strict"); strict && !strict->is_boolean()) {
    WrongType("response_format.json_schema.strict", "a boolean");
  }
  const Json* schema = Find(*spec, "schema");
  if (schema == nullptr) BadField("response_format", "response_format.json_schema needs a 'schema'");
  if (!schema->is_object()) WrongType("response_format.json_schema.schema", "an object");
  out.kind = structured::OutputSpec::Kind::kJsonSchema;
  out.schema = ParseOrdered(text, {"response_format"})["response_format"]["json_schema"]["schema"];
}

// vLLM's structured_outputs (structured/output_spec.h), with its keys in the request's order.
void ParseStructuredOutputs(const Json& body, std::string_view text, GenerationRequest& r) {
  if (Find(body, "structured_outputs") == nullptr) return;
  if (r.output.active()) {
    BadField("structured_outputs", "'structured_outputs' cannot be combined with a "
             "response_format of type json_object, json_schema or structural_tag");
  }
  try {
    r.output = structured::ParseStructuredOutputs(
        ParseOrdered(text, {"structured_outputs"})["structured_outputs"]);
  } catch (const InternalError&) {
    throw;  // a bug in latent (a 500), not a bad field
  } catch (const Error& e) {
    BadField("structured_outputs", e.what());
  }
  r.output_field = "structured_outputs";
}

// A float sampling field, checked on the request's double by the rule every front shares
// (engine::SamplingNumberError).
std::optional<float> GetSamplingNumber(const Json& body, const char* key) {
  const std::optional<double> v = GetNumber(body, key);
  if (!v) return std::nullopt;
  if (const std::optional<std::string> error = engine::SamplingNumberError(key, *v)) {
    BadField(key, StrCat("'", key, "' ", *error));
  }
  return static_cast<float>(*v);
}

void ParseSampling(const Json& body, const ServingLimits& limits, GenerationRequest& r) {
  engine::SamplingParams& s = r.sampling;
  s.temperature = GetSamplingNumber(body, "temperature").value_or(1.0f);  // OpenAI's default
  s.top_p = GetSamplingNumber(body, "top_p").value_or(s.top_p);
  if (auto v = GetInt(body, "top_k")) {
    const std::optional<int32_t> k = engine::TopKFromRequest(*v);
    if (!k) BadField("top_k", StrCat("'top_k' ", engine::kTopKRange, ", got ", *v));
    s.top_k = *k;
  }
  for (auto [key, field] : {std::pair{"min_p", &s.min_p},
                            {"presence_penalty", &s.presence_penalty},
                            {"frequency_penalty", &s.frequency_penalty},
                            {"repetition_penalty", &s.repetition_penalty}}) {
    *field = GetSamplingNumber(body, key).value_or(*field);
  }
  if (const Json* seed = Find(body, "seed")) {
    if (seed->is_number_unsigned()) {
      s.seed = seed->get<uint64_t>();
    } else if (seed->is_number_integer()) {
      s.seed = engine::SeedFromRequest(seed->get<int64_t>());  // -1: none, as vLLM
    } else {
      WrongType("seed", "an integer");
    }
  }
  if (auto v = GetInt(body, "n")) {
    if (*v < 1 || *v > limits.max_n)
      BadField("n", StrCat("'n' must be in [1, ", limits.max_n, "], got ", *v));
    s.n = static_cast<int32_t>(*v);
  }
  if (const std::optional<std::string> error = engine::GreedySamplesError(s.temperature, s.n)) {
    BadField("n", *error);
  }

  // OpenAI's logit_bias: JSON keys are strings, so token ids come as "50256".
  if (const Json* bias = Find(body, "logit_bias")) {
    if (!bias->is_object()) WrongType("logit_bias", "an object of token ids to biases");
    for (const auto& [key, value] : bias->items()) {
      const std::optional<int64_t> id = TokenIdKey(key);
      if (!id) {
        BadField("logit_bias", StrCat("'logit_bias' key '", key,
                                      "' is not a token id (an integer in decimal, as a string, "
                                      "without leading zeros)"));
      }
      if (*id < 0 || *id > std::numeric_limits<int32_t>::max() ||
          (limits.vocab_size > 0 && *id >= limits.vocab_size)) {
        BadField("logit_bias", StrCat("token id ", *id, " in 'logit_bias' is outside the "
                                      "vocabulary (size ", limits.vocab_size, ")"));
      }
      if (!value.is_number()) {
        BadField("logit_bias", StrCat("'logit_bias' value for token id ", *id,
                                      " must be a number, got ", value.dump()),
                 "invalid_type");
      }
      const double b = value.get<double>();
      if (!(b >= -100 && b <= 100)) {
        BadField("logit_bias", StrCat("'logit_bias' value for token id ", *id,
                                      " must be in [-100, 100], got ", b));
      }
      s.logit_bias[static_cast<int32_t>(*id)] = static_cast<float>(b);
    }
  }
  if (const Json* ids = Find(body, "allowed_token_ids")) {
    if (!ids->is_array()) WrongType("allowed_token_ids", "a list of token ids");
    if (ids->empty()) BadField("allowed_token_ids", "'allowed_token_ids' must not be empty");
    s.allowed_token_ids = TokenIds(*ids, "allowed_token_ids", limits);
  }

  // Logprobs: an integer (alternatives per token) for completions; a boolean plus top_logprobs
  // for chat.
  if (r.endpoint == Endpoint::kCompletions) {
    if (const Json* lp = Find(body, "logprobs")) {
      if (lp->is_boolean()) WrongType("logprobs", "an integer (the number of alternatives)");
      const int64_t k = *GetInt(body, "logprobs");
      if (const std::optional<std::string> error = engine::LogprobsCountError(k)) {
        BadField("logprobs", StrCat("'logprobs' ", *error));
      }
      r.logprobs = true;
      r.top_logprobs = static_cast<int32_t>(k);
    }
  } else {
    r.logprobs = GetBool(body, "logprobs", false);
    if (auto k = GetInt(body, "top_logprobs")) {
      if (const std::optional<std::string> error = engine::LogprobsCountError(*k)) {
        BadField("top_logprobs", StrCat("'top_logprobs' ", *error));
      }
      if (*k > 0 && !r.logprobs) BadField("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      r.top_logprobs = static_cast<int32_t>(*k);
    }
  }
  s.top_logprobs = r.logprobs ? r.top_logprobs : -1;
}

void ParseStop(const Json& body, const ServingLimits& limits, GenerationRequest& r) {
  r.include_stop_str_in_output = GetBool(body, "include_stop_str_in_output", false);
  const Json* stop = Find(body, "stop");
  if (!stop) return;
  auto add = [&](const Json& item) {
    if (!item.is_string()) WrongType("stop", "a string or a list of strings");
    const std::string& text = item.get_ref<const std::string&>();
    if (text.empty()) BadField("stop", "stop strings must not be empty");
    if (text.size() > limits.max_stop_bytes) {
      BadField("stop", StrCat("stop strings are at most ", limits.max_stop_bytes, " bytes"));
    }
    r.stop.push_back(text);
  };
  if (stop->is_array()) {
    if (static_cast<int64_t>(stop->size()) > limits.max_stop) {
      BadField("stop", StrCat("at most ", limits.max_stop, " stop strings"));
    }
    for (const Json& item : *stop) add(item);
  } else {
    add(*stop);
  }
}

// `body` with the default of each sampling field it leaves out (absent or null): vLLM's
// to_sampling_params takes a request's value, else the server default, else OpenAI's.
void MergeSamplingDefaults(const Json& defaults, Json& body) {
  body.update(SamplingDefaultsLeftOut(defaults, body));
}

void ParseMaxTokens(const Json& body, GenerationRequest& r) {
  std::optional<int64_t> max_tokens;
  const char* field = "max_tokens";
  if (r.endpoint == Endpoint::kChatCompletions) {
    if (auto v = GetInt(body, "max_completion_tokens")) {
      max_tokens = v;
      field = "max_completion_tokens";
    }
  }
  if (!max_tokens) max_tokens = GetInt(body, "max_tokens");
  // 0 scores the prompt: only with echo, which is what returns something then.
  const int64_t least = r.echo ? 0 : 1;
  const char* zero_note = r.endpoint == Endpoint::kCompletions && !r.echo
                              ? " (0 only with 'echo': true, to score the prompt)"
                              : "";
  if (max_tokens && *max_tokens < least) {
    BadField(field, StrCat("'", field, "' must be at least ", least, zero_note, ", got ", *max_tokens));
  }
  // Also validate max_tokens when max_completion_tokens won.
  if (auto v = GetInt(body, "max_tokens"); v && *v < least) {
    BadField("max_tokens",
             StrCat("'max_tokens' must be at least ", least, zero_note, ", got ", *v));
  }
  r.max_tokens = max_tokens;
  r.max_tokens_null = body.contains("max_tokens") && body["max_tokens"].is_null();
  if (auto v = GetInt(body, "min_tokens")) {
    if (*v < 0) BadField("min_tokens", StrCat("'min_tokens' must be >= 0, got ", *v));
    if (max_tokens && *v > *max_tokens) {
      BadField("min_tokens", StrCat("'min_tokens' (", *v, ") must be at most '", field, "' (",
                                    *max_tokens, ")"));
    }
    r.min_tokens = *v;
  }
}

}  // namespace

OrderedJson ParseOrdered(std::string_view text, std::initializer_list<std::string_view> keys) {
  if (keys.size() == 0) return OrderedJson::object();  // (ParseJsonKeeping keeps all then)
  return tokenizer::ParseJsonKeeping(text, keys);
}

std::string ApiError::type() const {
  return status_ >= 500 ? "server_error" : "invalid_request_error";
}

OrderedJson ErrorJson(const ApiError& error) {
  OrderedJson e;
  e["message"] = error.message();
  e["type"] = error.type();
  e["param"] = error.param().empty() ? OrderedJson(nullptr) : OrderedJson(error.param());
  e["code"] = error.code().empty() ? OrderedJson(nullptr) : OrderedJson(error.code());
  return {{"error", e}};
}

OrderedJson ErrorJson(int status, const std::string& message, const std::string& code) {
  return ErrorJson(ApiError(status, message, "", code));
}

ApiError RequestError(const Error& error, const std::string& context, std::string param) {
  if (dynamic_cast<const InternalError*>(&error) != nullptr) {
    return ApiError(500, StrCat("internal error: ", context, error.what()), "", "internal_error");
  }
  return ApiError(400, StrCat(context, error.what()), std::move(param));
}

std::optional<int64_t> TokenIdKey(std::string_view key) {
  const bool negative = !key.empty() && key[0] == '-';
  const std::string_view digits = key.substr(negative ? 1 : 0);
  // 18 digits at most: any int64 of them, and far past every vocabulary.
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  // The canonical form only ("5", not "05" or "-0"): two keys for one id would leave which bias
  // applies to JSON's key order.
  if (digits[0] == '0' && (digits.size() > 1 || negative)) return std::nullopt;
  int64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return negative ? -value : value;
}

std::optional<int64_t> IntegralNumber(const Json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.0e18) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

Json ParseJsonObject(std::string_view body) {
  // Bound the nesting before parsing, so nothing later recurses deeply.
  if (JsonNestsDeeperThan(body, kMaxJsonDepth)) {
    throw ApiError(400, StrCat("the JSON body is nested deeper than ", kMaxJsonDepth, " levels"),
                   "", "invalid_json");
  }
  Json json;
  try {
    json = Json::parse(body.begin(), body.end());
  } catch (const Json::exception& e) {
    throw ApiError(400, StrCat("the body is not valid JSON: ", e.what()), "", "invalid_json");
  }
  if (!json.is_object()) throw ApiError(400, "the body must be a JSON object", "", "invalid_json");
  return json;
}

GenerationRequest ParseGenerationRequest(std::string_view body_text, Endpoint endpoint,
                                         const ServingLimits& limits) {
  Json body = ParseJsonObject(body_text);
  GenerationRequest r;
  r.endpoint = endpoint;
  CheckModel(body, limits, &r.model);
  if (r.model.empty()) r.model = limits.model_name;

  if (endpoint == Endpoint::kCompletions) {
    r.prompts = ParsePrompt(body, limits);
  } else {
    TakeChatFields(ParseChat(body, body_text), r);
    r.tool_choice = ParseToolChoice(body, r.tools);
    r.parallel_tool_calls = GetBool(body, "parallel_tool_calls", true);
  }

  r.stream = GetBool(body, "stream", false);
  if (const Json* options = Find(body, "stream_options")) {
    if (!options->is_object()) WrongType("stream_options", "an object");
    if (!r.stream)
      BadField("stream_options", "'stream_options' is only allowed with 'stream': true");
    r.include_usage = GetBool(*options, "include_usage", false);
    // vLLM's: only with include_usage (include_usage and continuous_usage_stats).
    r.continuous_usage = GetBool(*options, "continuous_usage_stats", false) && r.include_usage;
  }
  if (endpoint == Endpoint::kCompletions) r.echo = GetBool(body, "echo", false);
  if (const std::optional<int64_t> k = GetInt(body, "prompt_logprobs")) {
    if (const std::optional<std::string> error = engine::LogprobsCountError(*k)) {
      BadField("prompt_logprobs", StrCat("'prompt_logprobs' ", *error));
    }
    // vLLM streams none either: it refuses them above 0 and sends none at 0 (so none are
    // computed here).
    if (r.stream && *k > 0) {
      BadField("prompt_logprobs", "'prompt_logprobs' above 0 are not available with 'stream': true",
               "unsupported_parameter");
    }
    if (!r.stream) r.prompt_logprobs = static_cast<int32_t>(*k);
  }
  if (const std::optional<int64_t> k = GetInt(body, "truncate_prompt_tokens")) {
    if (!engine::TruncatePromptTokensValid(*k)) {
      BadField("truncate_prompt_tokens", StrCat("'truncate_prompt_tokens' ",
                                                engine::kTruncatePromptTokensRange, ", got ", *k));
    }
    r.truncate_prompt_tokens = *k;
  }
  ParseMaxTokens(body, r);
  MergeSamplingDefaults(limits.sampling_defaults, body);
  ParseSampling(body, limits, r);
  // vLLM's to_sampling_params: echo with logprobs computes the prompt's logprobs too
  // (prompt_logprobs = logprobs when not asked), and each non-streamed choice carries them as if
  // asked; its stream chunks have no such field (echo's logprobs stream as ever).
  if (r.echo && r.logprobs && r.prompt_logprobs < 0 && !r.stream) {
    r.prompt_logprobs = r.top_logprobs;
  }
  RejectUnsupported(body, endpoint, r.sampling.n);
  ParseResponseFormat(body, body_text, r.output);
  ParseStructuredOutputs(body, body_text, r);
  if (static_cast<int64_t>(r.num_prompts()) * r.sampling.n > limits.max_choices) {
    BadField("n", StrCat("prompts x n is ", static_cast<int64_t>(r.num_prompts()) * r.sampling.n,
                         "; at most ", limits.max_choices, " choices per request"));
  }
  ParseStop(body, limits, r);
  if (const Json* ids = Find(body, "stop_token_ids")) {
    if (!ids->is_array()) WrongType("stop_token_ids", "a list of token ids");
    r.stop_token_ids = TokenIds(*ids, "stop_token_ids", limits);
  }
  r.ignore_eos = GetBool(body, "ignore_eos", false);
  r.skip_special_tokens = GetBool(body, "skip_special_tokens", true);
  r.return_token_ids = GetBool(body, "return_token_ids", false);
  r.return_tokens_as_token_ids = GetBool(body, "return_tokens_as_token_ids", false);
  r.user = GetString(body, "user").value_or("");
  // Engine::Submit validates the sampling fields again (SamplingParams::Validate); its errors
  // become 400 too.
  return r;
}

engine::Request MakeEngineRequest(const GenerationRequest& request, std::vector<int32_t> prompt,
                                  const ServingLimits& limits) {
  if (request.truncate_prompt_tokens) {
    // vLLM's: the prompt's last k tokens (its default left truncation). The room is the context
    // less max_tokens as vLLM counts it here (`max_tokens or 0`: a completion's 16 when left out,
    // 0 when null and for a chat's); -1 takes all of it, and a k past it is refused, as vLLM
    // refuses it.
    const bool sixteen = request.endpoint == Endpoint::kCompletions && !request.max_tokens_null;
    const int64_t most = request.max_tokens.value_or(sixteen ? 16 : 0);
    if (const std::optional<std::string> error = engine::TruncatePrompt(
            prompt, *request.truncate_prompt_tokens, most, limits.context_tokens)) {
      BadField("truncate_prompt_tokens", StrCat("'truncate_prompt_tokens' ", *error));
    }
  }
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n == 0) BadField("prompt", "the prompt is empty (no tokens)");
  const int64_t room = std::min(limits.context_tokens, limits.cache_tokens);
  const char* field = request.endpoint == Endpoint::kCompletions ? "prompt" : "messages";
  const bool score_only = request.max_tokens == 0;  // Needs no room beyond the prompt.
  if (score_only && n > std::min(limits.context_tokens, limits.cache_tokens)) {
    BadField(field,
             StrCat("the prompt is ", n, " tokens, but this model's maximum context length is ",
                    limits.context_tokens, " tokens and the cache holds ", limits.cache_tokens),
             "context_length_exceeded");
  }
  if (!score_only && n >= limits.context_tokens) {
    BadField(field,
             StrCat("This model's maximum context length is ", limits.context_tokens,
                    " tokens, and the prompt is ", n, " tokens: no room for a completion"),
             "context_length_exceeded");
  }
  if (!score_only && n >= limits.cache_tokens) {
    BadField(field,
             StrCat("the prompt is ", n, " tokens, but the cache holds only ", limits.cache_tokens,
                    " tokens: no room for a completion"),
             "context_length_exceeded");
  }
  // A completion that leaves max_tokens out has CompletionRequest's 16. Otherwise vLLM's
  // get_max_tokens with None: the smallest of the room left and generation_config's
  // max_new_tokens.
  const bool sixteen = request.endpoint == Endpoint::kCompletions && !request.max_tokens_null;
  int64_t fallback = room - n;
  if (sixteen) {
    fallback = std::min<int64_t>(16, fallback);
  } else if (const Json* most = Find(limits.sampling_defaults, "max_tokens")) {
    fallback = std::min(fallback, most->get<int64_t>());
  }
  int64_t max_tokens = request.max_tokens.value_or(fallback);
  // Saturating: a max_tokens near INT64_MAX would wrap the sum negative and pass both checks.
  const int64_t requested = SaturatingAdd(n, max_tokens);
  if (requested > limits.context_tokens) {
    BadField("max_tokens",
             StrCat("This model's maximum context length is ", limits.context_tokens,
                    " tokens. However, you requested ", requested, " tokens (", n,
                    " in the prompt, ", max_tokens, " for the completion)"),
             "context_length_exceeded");
  }
  if (requested > limits.cache_tokens) {
    BadField("max_tokens",
             StrCat("the cache holds ", limits.cache_tokens, " tokens. However, you requested ",
                    requested, " tokens (", n, " in the prompt, ", max_tokens,
                    " for the completion)"),
             "context_length_exceeded");
  }
  // Against the default too, as vLLM checks its resolved max_tokens.
  if (request.min_tokens > max_tokens) {
    BadField("min_tokens", StrCat("'min_tokens' (", request.min_tokens,
                                  ") must be at most max_tokens, which is ", max_tokens,
                                  " for this request"));
  }
  engine::Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.min_tokens = request.min_tokens;
  r.sampling = request.sampling;
  r.stop_token_ids = request.stop_token_ids;
  r.ignore_eos = request.ignore_eos;
  if (request.echo && request.logprobs) r.prompt_logprobs = request.top_logprobs;
  r.prompt_logprobs = std::max(r.prompt_logprobs, request.prompt_logprobs);
  r.prompt_ranks = request.prompt_logprobs >= 0;  // A streamed echo's logprobs show no rank.
  return r;
}

TokenizeRequest ParseTokenizeRequest(std::string_view body_text, const ServingLimits& limits) {
  const Json body = ParseJsonObject(body_text);
  TokenizeRequest r;
  CheckModel(body, limits, &r.model);
  const bool has_prompt = Find(body, "prompt") != nullptr;
  const bool has_messages = Find(body, "messages") != nullptr;
  if (has_prompt == has_messages) {
    BadField("prompt", "give either 'prompt' (text) or 'messages' (a conversation)",
             "missing_required_parameter");
  }
  if (has_prompt) {
    r.prompt = *GetString(body, "prompt");
    r.add_special_tokens = GetBool(body, "add_special_tokens", true);
  } else {
    r.is_chat = true;
    TakeChatFields(ParseChat(body, body_text), r);
    r.add_special_tokens = GetBool(body, "add_special_tokens", false);
  }
  r.return_token_strs = GetBool(body, "return_token_strs", false);
  return r;
}

DetokenizeRequest ParseDetokenizeRequest(std::string_view body_text, const ServingLimits& limits) {
  const Json body = ParseJsonObject(body_text);
  DetokenizeRequest r;
  CheckModel(body, limits, &r.model);
  const Json* tokens = Find(body, "tokens");
  if (!tokens) BadField("tokens", "'tokens' is required", "missing_required_parameter");
  if (!tokens->is_array()) WrongType("tokens", "a list of token ids");
  r.tokens = TokenIds(*tokens, "tokens", limits);
  return r;
}

// ---- Responses ----

OrderedJson UsageJson(const Usage& usage, bool details) {
  OrderedJson u;
  u["prompt_tokens"] = usage.prompt_tokens;
  u["completion_tokens"] = usage.completion_tokens;
  u["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  if (details) u["prompt_tokens_details"] = {{"cached_tokens", usage.cached_tokens}};
  return u;
}

OrderedJson LogprobValue(float logprob) { return std::max(logprob, -9999.0f); }

namespace {

OrderedJson Bytes(const std::string& text) {
  OrderedJson bytes = OrderedJson::array();
  for (unsigned char c : text) bytes.push_back(c);
  return bytes;
}

// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. Chat: {"content":
// [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
OrderedJson LogprobsJson(Endpoint endpoint, const std::vector<LogprobEntry>& entries) {
  if (endpoint == Endpoint::kCompletions) {
    OrderedJson tokens = OrderedJson::array(), logprobs = OrderedJson::array(),
                top = OrderedJson::array(), offsets = OrderedJson::array();
    for (const LogprobEntry& e : entries) {
      tokens.push_back(e.token);
      offsets.push_back(e.text_offset);
      if (e.null_logprob) {
        logprobs.push_back(nullptr);
        top.push_back(nullptr);
        continue;
      }
      logprobs.push_back(LogprobValue(e.logprob));
      // The token itself first, then its alternatives: up to logprobs + 1 entries (OpenAI; vLLM's
      // _create_completion_logprobs), so "logprobs": 0 still gives {token: logprob}. Keyed by
      // text, ids of one text share a key, which keeps the better logprob.
      OrderedJson alternatives = OrderedJson::object();
      auto add = [&](const std::string& token, float lp) {
        const auto it = alternatives.find(token);
        if (it == alternatives.end()) {
          alternatives[token] = LogprobValue(lp);
        } else if (LogprobValue(lp).get<float>() > it->get<float>()) {
          *it = LogprobValue(lp);
        }
      };
      add(e.token, e.logprob);
      for (const auto& [token, lp] : e.top) add(token, lp);
      top.push_back(std::move(alternatives));
    }
    return {{"tokens", tokens},
            {"token_logprobs", logprobs},
            {"top_logprobs", top},
            {"text_offset", offsets}};
  }
  OrderedJson content = OrderedJson::array();
  for (const LogprobEntry& e : entries) {
    OrderedJson top = OrderedJson::array();
    for (const auto& [token, lp] : e.top) {
      top.push_back({{"token", token}, {"logprob", LogprobValue(lp)}, {"bytes", Bytes(token)}});
    }
    content.push_back({{"token", e.token},
                       {"logprob", LogprobValue(e.logprob)},
                       {"bytes", Bytes(e.bytes.value_or(e.token))},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// message.tool_calls (`whole`) or delta.tool_calls.
OrderedJson ToolCallsJson(const std::vector<ToolCallOutput>& calls, bool whole) {
  OrderedJson list = OrderedJson::array();
  for (const ToolCallOutput& call : calls) {
    OrderedJson j;
    if (!whole) j["index"] = call.index;
    if (whole || !call.id.empty()) {
      j["id"] = call.id;
      j["type"] = "function";
      j["function"] = {{"name", call.name}, {"arguments", call.arguments}};
    } else {
      j["function"] = {{"arguments", call.arguments}};
    }
    list.push_back(std::move(j));
  }
  return list;
}

OrderedJson FinishReason(const std::string& reason) {
  return reason.empty() ? OrderedJson(nullptr) : OrderedJson(reason);
}

OrderedJson Envelope(const ResponseMeta& meta, bool chunk) {
  OrderedJson j;
  j["id"] = meta.id;
  if (meta.endpoint == Endpoint::kCompletions) {
    j["object"] = "text_completion";
  } else {
    j["object"] = chunk ? "chat.completion.chunk" : "chat.completion";
  }
  j["created"] = meta.created;
  j["model"] = meta.model;
  j["system_fingerprint"] = nullptr;
  return j;
}

}  // namespace

OrderedJson ResponseJson(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices,
                         const Usage& usage) {
  OrderedJson j = Envelope(meta, false);
  OrderedJson list = OrderedJson::array();
  for (const ChoiceOutput& c : choices) {
    OrderedJson choice;
    choice["index"] = c.index;
    if (meta.endpoint == Endpoint::kCompletions) {
      choice["text"] = c.text;
    } else {
      // Empty content is null beside tool calls, and under a reasoning parser (vLLM's parsers
      // return None for it, and its serving_chat passes that on); without one it stays "". A
      // forced call (named or required tool_choice) has "", as vLLM's forced paths write it.
      const bool null_content = c.text.empty() && !meta.forced_tool_call &&
                                (!c.tool_calls.empty() || meta.reasoning);
      choice["message"] = {{"role", "assistant"},
                           {"content", null_content ? OrderedJson(nullptr) : OrderedJson(c.text)}};
      if (meta.reasoning) {
        choice["message"]["reasoning_content"] =
            c.reasoning.empty() ? OrderedJson(nullptr) : OrderedJson(c.reasoning);
      }
      if (!c.tool_calls.empty()) {
        choice["message"]["tool_calls"] = ToolCallsJson(c.tool_calls, /*whole=*/true);
      }
    }
    choice["logprobs"] =
        meta.logprobs ? LogprobsJson(meta.endpoint, c.logprobs) : OrderedJson(nullptr);
    choice["finish_reason"] = FinishReason(c.finish_reason);
    choice["stop_reason"] = c.stop_reason;
    if (meta.return_token_ids) {
      choice["token_ids"] = c.token_ids;
      if (meta.endpoint == Endpoint::kCompletions) choice["prompt_token_ids"] = c.prompt_token_ids;
    }
    if (meta.endpoint == Endpoint::kCompletions && !c.prompt_logprobs.is_null()) {
      choice["prompt_logprobs"] = c.prompt_logprobs;
    }
    list.push_back(std::move(choice));
  }
  j["choices"] = std::move(list);
  j["usage"] = UsageJson(usage);
  if (meta.return_token_ids && meta.endpoint == Endpoint::kChatCompletions) {
    j["prompt_token_ids"] =
        choices.empty() ? OrderedJson::array() : OrderedJson(choices[0].prompt_token_ids);
  }
  if (meta.endpoint == Endpoint::kChatCompletions && !choices.empty() &&
      !choices[0].prompt_logprobs.is_null()) {
    j["prompt_logprobs"] = choices[0].prompt_logprobs;
  }
  return j;
}

OrderedJson ChunkJson(const ResponseMeta& meta, const ChoiceOutput& c, bool role_only) {
  OrderedJson j = Envelope(meta, true);
  OrderedJson choice;
  choice["index"] = c.index;
  if (meta.endpoint == Endpoint::kCompletions) {
    choice["text"] = c.text;
  } else if (role_only) {
    choice["delta"] = {{"role", "assistant"}, {"content", ""}};
  } else if (!c.reasoning.empty() || !c.tool_calls.empty()) {
    OrderedJson delta = OrderedJson::object();
    if (!c.reasoning.empty()) delta["reasoning_content"] = c.reasoning;
    if (!c.text.empty()) delta["content"] = c.text;
    if (!c.tool_calls.empty()) delta["tool_calls"] = ToolCallsJson(c.tool_calls, /*whole=*/false);
    choice["delta"] = std::move(delta);
  } else if (c.text.empty() && !c.finish_reason.empty()) {
    choice["delta"] = OrderedJson::object();
  } else {
    choice["delta"] = {{"content", c.text}};
  }
  choice["logprobs"] =
      meta.logprobs && !role_only ? LogprobsJson(meta.endpoint, c.logprobs) : OrderedJson(nullptr);
  choice["finish_reason"] = FinishReason(c.finish_reason);
  if (meta.endpoint == Endpoint::kCompletions || (!role_only && !c.finish_reason.empty())) {
    choice["stop_reason"] = c.stop_reason;
  }
  if (meta.return_token_ids && !role_only) choice["token_ids"] = c.token_ids;
  const bool prompt_ids = meta.return_token_ids && !c.prompt_token_ids.empty();
  if (prompt_ids && meta.endpoint == Endpoint::kCompletions) {
    choice["prompt_token_ids"] = c.prompt_token_ids;
  }
  j["choices"] = OrderedJson::array({std::move(choice)});
  // vLLM's continuous usage has no prompt_tokens_details (only the final usage may).
  if (meta.include_usage) {
    j["usage"] = c.usage ? UsageJson(*c.usage, /*details=*/false) : OrderedJson(nullptr);
  }
  if (prompt_ids && meta.endpoint == Endpoint::kChatCompletions) {
    j["prompt_token_ids"] = c.prompt_token_ids;
  }
  return j;
}

OrderedJson PromptLogprobsJson(const std::vector<std::vector<RankedLogprob>>& positions) {
  OrderedJson list = OrderedJson::array({nullptr});
  for (const std::vector<RankedLogprob>& listed : positions) {
    OrderedJson entry = OrderedJson::object();
    for (const RankedLogprob& e : listed) {
      const std::string key = std::to_string(e.token);
      if (entry.contains(key)) continue;  // The token among its own alternatives.
      entry[key] = {{"logprob", LogprobValue(e.logprob)},
                    {"rank", e.rank},
                    {"decoded_token", e.decoded ? OrderedJson(*e.decoded) : OrderedJson(nullptr)}};
    }
    list.push_back(std::move(entry));
  }
  return list;
}

OrderedJson UsageChunkJson(const ResponseMeta& meta, const Usage& usage) {
  OrderedJson j = Envelope(meta, true);
  j["choices"] = OrderedJson::array();
  j["usage"] = UsageJson(usage);
  return j;
}

OrderedJson ModelsJson(const std::string& model_name, int64_t created, int64_t context_tokens) {
  OrderedJson model = {{"id", model_name},
                       {"object", "model"},
                       {"created", created},
                       {"owned_by", "latent"},
                       {"max_model_len", context_tokens}};
  return {{"object", "list"}, {"data", OrderedJson::array({model})}};
}

std::string Dump(const OrderedJson& json) {
  return json.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

std::string SseData(const OrderedJson& json) { return "data: " + Dump(json) + "\n\n"; }

}  // namespace latent::server
