// The rules every front applies to a request's fields before the engine sees them: the server's
// requests (server/openai_schema.cc) and request lines (generate/request_line.cc: `latent
// generate --prompts` and latent.LLM). Kept here so that the fronts agree. Each front names the
// field in its own words ("'top_p' ..." in the server's 400, "field 'top_p' ..." in a request
// line's error) and puts the text these return after the name.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "base/error.h"

namespace latent::engine {

// A number in its shortest round-trip form: 1.0000000001 stays that, where an ostream's six
// digits would print "1" and a range error would name a value that is in range.
inline std::string ShortestNumber(double v) {
  char text[32];
  const auto [end, ec] = std::to_chars(text, text + sizeof(text), v);
  return ec == std::errc() ? std::string(text, end) : StrCat(v);
}

// A float sampling field's value checked on the double the request holds, not on the engine's
// float: rounding turns top_p 1.0000000001 into 1 and repetition_penalty 100.000001 into 100,
// which pass a float's range check, and temperature 1e300 into inf (1e-300 into 0, greedy).
// `key` is temperature, top_p, min_p, presence_penalty, frequency_penalty or
// repetition_penalty. nullopt when `v` is in range; else what is wrong, to follow the field's
// name ("must be in (0, 1], got 1.0000000001").
inline std::optional<std::string> SamplingNumberError(std::string_view key, double v) {
  if (!std::isfinite(v)) return "must be finite";
  auto got = [v](const char* range) {
    return StrCat("must be ", range, ", got ", ShortestNumber(v));
  };
  // The fields a float's range can fail: the ones whose zero or infinity means something else.
  bool float_range = true;
  if (key == "temperature") {
    if (v < 0) return got(">= 0");
  } else if (key == "top_p") {
    if (!(v > 0 && v <= 1)) return got("in (0, 1]");
  } else if (key == "min_p") {
    if (!(v >= 0 && v <= 1)) return got("in [0, 1]");
  } else if (key == "repetition_penalty") {
    // A floor mirroring the ceiling: a logit divided by a subnormal penalty overflows to inf.
    if (!(v >= 0.01 && v <= 100)) return got("in [0.01, 100]");
  } else {  // presence_penalty, frequency_penalty: a tiny one rounding to 0 changes nothing
    if (!(v >= -2 && v <= 2)) return got("in [-2, 2]");
    float_range = false;
  }
  const float f = static_cast<float>(v);
  if (float_range && (std::isinf(f) || (v != 0 && f == 0))) {
    return StrCat("is ", ShortestNumber(v), ", outside the range of a 32-bit float");
  }
  return std::nullopt;
}

// The most alternatives per token a request may ask for: vLLM's default max_logprobs.
inline constexpr int64_t kMaxLogprobs = 20;

// A request's logprobs (completions; top_logprobs in chat) or prompt_logprobs, when it gives
// one (absent or null is none): in [0, kMaxLogprobs]. vLLM's -1 (the whole vocabulary) is past
// that limit, as past vLLM's default max_logprobs. Request lines hold an absent count as -1
// (SamplingParams::top_logprobs, Request::prompt_logprobs); a -1 they are given is refused here,
// not taken for absent. nullopt when `k` is in range; else what is wrong, to follow the field's
// name.
inline std::optional<std::string> LogprobsCountError(int64_t k) {
  if (k >= 0 && k <= kMaxLogprobs) return std::nullopt;
  return StrCat("must be in [0, ", kMaxLogprobs, "], got ", k);
}

// A request's integer seed: -1 is no seed, an unseeded draw, as vLLM's SamplingParams maps
// seed=-1 to None (its OpenAI server passes the request's seed there); any other negative seed
// is its two's-complement bits.
inline std::optional<uint64_t> SeedFromRequest(int64_t seed) {
  if (seed == -1) return std::nullopt;
  return static_cast<uint64_t>(seed);
}

// vLLM's SamplingParams._verify_greedy_sampling: n samples of greedy decoding (temperature 0)
// would be n copies of one, so a request asking for them is refused, in vLLM's words. (The
// engine itself runs them: its tests fork greedy samples.) nullopt when `temperature` and `n`
// go together; else the whole message, which names n.
inline std::optional<std::string> GreedySamplesError(double temperature, int64_t n) {
  if (temperature == 0 && n > 1) {
    return StrCat("n must be 1 when using greedy sampling, got ", n, ".");
  }
  return std::nullopt;
}

// vLLM's truncate_prompt_tokens: k >= 1 keeps the prompt's last k tokens (its default left
// truncation); -1 keeps as many as the context leaves beside max_tokens.
inline constexpr const char* kTruncatePromptTokensRange =
    "must be -1 (as many as the context leaves) or a positive number of tokens";
inline bool TruncatePromptTokensValid(int64_t k) { return k == -1 || k >= 1; }

// Truncates `prompt` to its last `k` tokens (TruncatePromptTokensValid), where the room for the
// prompt is `context_tokens` less `max_tokens` (as vLLM counts it: `max_tokens or 0`, 0 where it
// is left to the context). -1 takes that room; a k past it is refused. nullopt when done; else
// what is wrong, to follow the field's name.
inline std::optional<std::string> TruncatePrompt(std::vector<int32_t>& prompt, int64_t k,
                                                 int64_t max_tokens, int64_t context_tokens) {
  const int64_t most = std::max<int64_t>(max_tokens, 0);
  const int64_t room = context_tokens - std::min(most, context_tokens);
  if (k == -1) k = room;
  if (k > room) {
    return StrCat("is ", k, ", more than the ", room, " tokens this model's context (",
                  context_tokens, ") leaves beside max_tokens (", most, ")");
  }
  if (k > 0 && static_cast<int64_t>(prompt.size()) > k) {
    prompt.erase(prompt.begin(), prompt.end() - k);
  }
  return std::nullopt;
}

}  // namespace latent::engine
