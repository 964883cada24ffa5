// What a client submits to the engine and what it gets back, token by token.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace latent::engine {

struct Request {
  std::vector<int32_t> prompt;         // Token ids.
  int64_t max_tokens = 16;             // Generated tokens at most (per sample).
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids; // Besides EOS.
  bool ignore_eos = false;
};

enum class FinishReason : uint8_t { kNone, kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason reason);

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// One event of one sample of a request: a new token, and/or its end.
struct RequestOutput {
  int64_t request_id = 0;
  int32_t sample = 0;        // 0 .. n-1
  bool has_token = false;
  int32_t token = -1;
  float logprob = 0.0f;                  // When logprobs were asked for.
  std::vector<TokenLogprob> top_logprobs;
  int64_t cached_prompt_tokens = -1;  // First token only: prompt tokens the prefix cache held.
  FinishReason finish = FinishReason::kNone;  // kNone while running.
  std::string error;                          // With kError.
};

// Called on the engine's thread; must not block for long.
using OutputCallback = std::function<void(const RequestOutput&)>;

}  // namespace latent::engine
