#include "generate/request_line.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <type_traits>

#include "base/error.h"
#include "base/error_context.h"
#include "base/json_depth.h"
#include "engine/request_fields.h"
#include "engine/sampling_params.h"
#include "server/chat_prompt.h"
#include "server/chat_request.h"
#include "server/openai_schema.h"
#include "server/tool_template.h"
#include "tokenizer/chat_template/exact_json.h"

namespace latent::generate {
namespace {

using Json = RequestJson;

// An integer of field `key` in T's range. nlohmann's get<int32_t> casts whatever number it
// finds, so ids: [4294967301] ran as token 5 and top_k: 1.5 as 1. A float with an integral
// value (16.0) counts, as in the server's requests (server::IntegralNumber).
template <typename T>
T Integer(const Json& v, const char* key) {
  static_assert(std::is_signed_v<T> && sizeof(T) <= sizeof(int64_t));
  const std::optional<int64_t> value = server::IntegralNumber(v);
  if (!value) {
    if (!v.is_number()) {
      Fail("field '", key, "' has the wrong type: ", v.dump(), " (expected an integer)");
    }
    const double d = v.get<double>();
    if (!v.is_number_integer() && !(std::isfinite(d) && d == std::floor(d))) {
      Fail("field '", key, "' must be an integer, not ", v.dump());
    }
  }
  if (!value || *value < std::numeric_limits<T>::min() || *value > std::numeric_limits<T>::max()) {
    Fail("field '", key, "': ", v.dump(), " is out of range (", std::numeric_limits<T>::min(),
         " to ", std::numeric_limits<T>::max(), ")");
  }
  return static_cast<T>(*value);
}

template <typename T>
T Field(const Json& line, const char* key, T fallback) {
  if (!line.contains(key) || line[key].is_null()) return fallback;
  const Json& v = line[key];
  if constexpr (std::is_same_v<T, std::vector<int32_t>>) {
    if (!v.is_array()) {
      Fail("field '", key, "' has the wrong type: ", v.dump(), " (expected a list of integers)");
    }
    T out;
    out.reserve(v.size());
    for (const Json& item : v) out.push_back(Integer<int32_t>(item, key));
    return out;
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return Integer<T>(v, key);
  } else {
    static_assert(std::is_same_v<T, bool>, "floats are SamplingNumber's, the seed Seed's");
    try {
      return v.get<T>();
    } catch (const Json::exception&) {
      Fail("field '", key, "' has the wrong type: ", v.dump());
    }
  }
}

// A float sampling field (temperature, top_p, min_p, the penalties): a number, not a bool (which
// nlohmann's get<float> casts to 1), checked on its double as the server checks it
// (engine::SamplingNumberError).
float SamplingNumber(const Json& line, const char* key, float fallback) {
  if (!line.contains(key) || line[key].is_null()) return fallback;
  const Json& v = line[key];
  if (!v.is_number()) {
    Fail("field '", key, "' has the wrong type: ", v.dump(), " (expected a number)");
  }
  const double d = v.get<double>();
  if (const std::optional<std::string> error = engine::SamplingNumberError(key, d)) {
    Fail("field '", key, "' ", *error);
  }
  return static_cast<float>(d);
}

// "seed": an integer, as the server takes it (-1: none, engine::SeedFromRequest; another negative
// one wraps); not a float or a bool, which get<uint64_t> would cast.
std::optional<uint64_t> Seed(const Json& line) {
  if (!line.contains("seed") || line["seed"].is_null()) return std::nullopt;
  const Json& seed = line["seed"];
  if (!seed.is_number_integer()) Fail("field 'seed' must be an integer, got ", seed.dump());
  if (seed.is_number_unsigned()) return seed.get<uint64_t>();
  return engine::SeedFromRequest(seed.get<int64_t>());
}

// "stop": a string or a list of non-empty strings.
std::vector<std::string> StopStrings(const Json& line) {
  if (!line.contains("stop") || line["stop"].is_null()) return {};
  const Json& stop = line["stop"];
  std::vector<std::string> out;
  if (stop.is_string()) {
    out.push_back(stop.get<std::string>());
  } else if (stop.is_array()) {
    for (const Json& s : stop) {
      if (!s.is_string()) Fail("field 'stop' must be a string or a list of strings: ", stop.dump());
      out.push_back(s.get<std::string>());
    }
  } else {
    Fail("field 'stop' must be a string or a list of strings: ", stop.dump());
  }
  for (const std::string& s : out) {
    if (s.empty()) Fail("field 'stop' holds an empty string");
  }
  return out;
}

// "logit_bias": an object of token ids, as strings (JSON keys are: the server's form, and what
// json.dumps makes of a Python dict[int, float]), to numbers. Ranges: SamplingParams::Validate,
// and the vocabulary's bound at Engine::Submit.
std::map<int32_t, float> LogitBias(const Json& line) {
  if (!line.contains("logit_bias") || line["logit_bias"].is_null()) return {};
  const Json& bias = line["logit_bias"];
  if (!bias.is_object()) {
    Fail("field 'logit_bias' has the wrong type: ", bias.dump(),
         " (expected an object of token ids to biases)");
  }
  std::map<int32_t, float> out;
  for (const auto& [key, value] : bias.items()) {
    const std::optional<int64_t> id = server::TokenIdKey(key);
    if (!id) {
      Fail("field 'logit_bias': key '", key,
           "' is not a token id (an integer string, without leading zeros)");
    }
    // Past int32 here; a negative id is SamplingParams::Validate's to refuse.
    if (*id < std::numeric_limits<int32_t>::min() || *id > std::numeric_limits<int32_t>::max()) {
      Fail("field 'logit_bias': token id ", *id, " is outside the vocabulary");
    }
    if (!value.is_number()) {
      Fail("field 'logit_bias': the bias of token id ", *id, " must be a number, not ",
           value.dump());
    }
    // The range on the double, as the server checks it: 100.0000001 rounds to 100.0f, which
    // Validate's float check would pass.
    const double b = value.get<double>();
    if (!(b >= -100 && b <= 100)) {
      Fail("logit_bias for token id ", *id, " must be in [-100, 100], got ", b);
    }
    out[static_cast<int32_t>(*id)] = static_cast<float>(b);
  }
  return out;
}

// "truncate_prompt_tokens" (nullopt when absent): -1 or positive, as the server takes it
// (engine::TruncatePromptTokensValid); whoever knows the context applies it
// (engine::TruncatePrompt).
std::optional<int64_t> TruncatePromptTokens(const Json& line) {
  if (!line.contains("truncate_prompt_tokens") || line["truncate_prompt_tokens"].is_null()) {
    return std::nullopt;
  }
  const auto k = Field<int64_t>(line, "truncate_prompt_tokens", 0);
  if (!engine::TruncatePromptTokensValid(k)) {
    Fail("field 'truncate_prompt_tokens' ", engine::kTruncatePromptTokensRange, ", got ", k);
  }
  return k;
}

// "logprobs" or "prompt_logprobs": -1 (none) when absent or null, as the engine holds none;
// a count given is in the server's range (engine::LogprobsCountError), so a -1 given is refused
// as the server and latent.LLM refuse it, not taken for absent.
int32_t LogprobsCount(const Json& line, const char* key) {
  if (!line.contains(key) || line[key].is_null()) return -1;
  const auto k = Field<int32_t>(line, key, -1);
  if (const std::optional<std::string> error = engine::LogprobsCountError(k)) {
    Fail("field '", key, "' ", *error);
  }
  return k;
}

}  // namespace

const tokenizer::Tokenizer& TextTools::Tokenizer() {
  if (!tokenizer_) tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::FromDir(dir_));
  return *tokenizer_;
}

const tokenizer::ChatTemplate& TextTools::Template() {
  if (!template_) {
    auto loaded = std::make_unique<tokenizer::ChatTemplate>(
        tokenizer::ChatTemplate::FromTokenizerDir(dir_));
    server::ProbeToolTemplate(*loaded);
    template_ = std::move(loaded);
  }
  return *template_;
}

std::string RenderChatLine(const Json& line, TextTools& text) {
  // The server's checks and shaping (server/chat_request.h), on the chat members only: the line's
  // other members need no unordered copy.
  // The prompt-end flags' types first, in request lines' own words ("field '...' has the wrong
  // type", as for every other field of a line), before the server's checks see them.
  Field<bool>(line, "continue_final_message", false);
  Field<bool>(line, "add_generation_prompt", true);
  server::Json body = server::Json::object();
  for (const char* key : {"messages", "tools", "chat_template_kwargs", "add_generation_prompt",
                          "continue_final_message"}) {
    if (line.contains(key)) body[key] = server::Json(line[key]);
  }
  try {
    const server::ChatFields chat = server::ParseChatFields(body, line);
    const tokenizer::ChatTemplate& chat_template = text.Template();
    try {
      return server::RenderChatFields(chat_template, chat);
    } catch (const Error& e) {
      FailLike(e, server::kChatTemplateFailed, e.what());
    }
  } catch (const server::ApiError& e) {
    Fail(e.what());
  }
}

std::vector<int32_t> PromptIds(const Json& line, TextTools& text, std::string* chat_prompt) {
  if (line.contains("ids")) return Field<std::vector<int32_t>>(line, "ids", {});
  if (line.contains("prompt")) {
    if (!line["prompt"].is_string()) Fail("field 'prompt' must be a string");
    return text.Tokenizer().Encode(line["prompt"].get<std::string>(), /*add_special_tokens=*/true);
  }
  if (line.contains("messages")) {
    const std::string rendered = RenderChatLine(line, text);
    std::vector<int32_t> ids = text.Tokenizer().Encode(rendered, /*add_special_tokens=*/false);
    if (chat_prompt) *chat_prompt = rendered;
    return ids;
  }
  Fail("needs 'ids', 'prompt' or 'messages'");
}

Json ParseRequestLineJson(std::string_view text) {
  if (JsonNestsDeeperThan(text, tokenizer::kMaxChatJsonDepth)) {
    Fail("the request nests more than ", tokenizer::kMaxChatJsonDepth, " levels deep");
  }
  // The chat members' integers exact, as the server's (server/openai_schema.cc ParseChat).
  return tokenizer::ParseJsonExactIntegers(text, {},
                                           {"messages", "tools", "chat_template_kwargs"});
}

engine::SamplingParams ParseSamplingFields(const Json& line) {
  engine::SamplingParams s;
  s.temperature = SamplingNumber(line, "temperature", 0.0f);
  // Parsed as the server parses it: -1 is off, as generation_config.json's -1 already was.
  const int64_t top_k = Field<int64_t>(line, "top_k", 0);
  const std::optional<int32_t> k = engine::TopKFromRequest(top_k);
  if (!k) Fail("field 'top_k' ", engine::kTopKRange, ", got ", top_k);
  s.top_k = *k;
  s.top_p = SamplingNumber(line, "top_p", 1.0f);
  s.min_p = SamplingNumber(line, "min_p", 0.0f);
  s.repetition_penalty = SamplingNumber(line, "repetition_penalty", 1.0f);
  s.presence_penalty = SamplingNumber(line, "presence_penalty", 0.0f);
  s.frequency_penalty = SamplingNumber(line, "frequency_penalty", 0.0f);
  s.seed = Seed(line);
  s.top_logprobs = LogprobsCount(line, "logprobs");
  s.n = Field<int32_t>(line, "n", 1);
  s.logit_bias = LogitBias(line);
  if (line.contains("allowed_token_ids") && !line["allowed_token_ids"].is_null()) {
    s.allowed_token_ids = Field<std::vector<int32_t>>(line, "allowed_token_ids", {});
  }
  s.Validate();
  // After n's range, as vLLM's _verify_args comes before its _verify_greedy_sampling.
  if (const std::optional<std::string> error = engine::GreedySamplesError(s.temperature, s.n)) {
    Fail(*error);
  }
  return s;
}

int32_t ParsePromptLogprobs(const Json& line) { return LogprobsCount(line, "prompt_logprobs"); }

void CheckFieldsWithoutPrompt(const Json& line) {
  // Absent, max_tokens is the submitter's default: min_tokens is then checked for sign only.
  const auto max_tokens =
      Field<int64_t>(line, "max_tokens", std::numeric_limits<int64_t>::max());
  engine::ValidateTokenCounts(max_tokens, Field<int64_t>(line, "min_tokens", 0));
  StopStrings(line);
  for (int32_t id : Field<std::vector<int32_t>>(line, "stop_token_ids", {})) {
    if (id < 0) Fail("stop_token_ids token id ", id, " is outside the vocabulary");
  }
  TruncatePromptTokens(line);
  // ParseRequestLine reads these as it reads them here.
  for (const char* flag : {"ignore_eos", "include_stop_str_in_output", "skip_special_tokens"}) {
    Field<bool>(line, flag, false);
  }
}

RequestLine ParseRequestLine(const Json& given, TextTools& text, int64_t default_max_tokens,
                             bool default_ignore_eos, const Json& sampling_defaults) {
  if (!given.is_object()) Fail("not a JSON object");
  // The line with the default of each sampling field it leaves out, copied only when it does.
  Json merged;
  const Json left_out = server::SamplingDefaultsLeftOut(sampling_defaults, given);
  if (!left_out.empty()) {
    merged = given;
    merged.update(left_out);
  }
  const Json& line = merged.is_null() ? given : merged;
  RequestLine out;
  engine::Request& r = out.request;
  r.prompt = PromptIds(line, text, &out.chat_prompt);
  r.max_tokens = Field<int64_t>(line, "max_tokens", default_max_tokens);
  r.min_tokens = Field<int64_t>(line, "min_tokens", 0);  // Engine::Submit checks its range
  // Checked now, not at submit: the request's n samples are allocated before it reaches the
  // engine.
  r.sampling = ParseSamplingFields(line);
  r.stop_token_ids = Field<std::vector<int32_t>>(line, "stop_token_ids", {});
  r.ignore_eos = Field<bool>(line, "ignore_eos", default_ignore_eos);
  r.prompt_logprobs = ParsePromptLogprobs(line);
  out.stop = StopStrings(line);
  out.include_stop = Field<bool>(line, "include_stop_str_in_output", false);
  out.skip_special_tokens = Field<bool>(line, "skip_special_tokens", true);
  out.truncate_prompt_tokens = TruncatePromptTokens(line);
  if (!out.stop.empty()) text.Tokenizer();  // Stop strings need the text: fail now if it can't be had.
  if (line.contains("structured_outputs") && !line["structured_outputs"].is_null()) {
    out.output = structured::ParseStructuredOutputs(line["structured_outputs"]);
  }
  out.arrival_step = Field<int64_t>(line, "arrival_step", 0);
  out.cancel_step = Field<int64_t>(line, "cancel_step", -1);
  return out;
}

}  // namespace latent::generate
