// What a client submits to the engine and what it gets back, token by token.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"
#include "engine/token_constraint.h"

namespace latent::engine {

struct Request {
  std::vector<int32_t> prompt;         // Token ids.
  int64_t max_tokens = 16;             // Generated tokens at most (per sample); 0: the prompt
                                       // only (scoring, with prompt_logprobs), ends "length".
  // Generated tokens at least (per sample), 0 <= min_tokens <= max_tokens: until a sample has
  // this many, its EOS ids (GenerationConfig::EndIds, unless ignore_eos) and stop_token_ids are
  // never drawn (vLLM's min_tokens). A structured-output grammar that allows only those ids
  // still ends the sample: the grammar wins. Stop strings are the caller's (the server ignores
  // them meanwhile too).
  int64_t min_tokens = 0;
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids; // Besides EOS.
  bool ignore_eos = false;
  // -1: none; 0: the logprob of every prompt token after the first; n: and its n best
  // alternatives (<= 20). Computed from the logits of the prompt positions during prefill; such a
  // request gets no prefix-cache hit (cached blocks have no logits), it recomputes its prompt.
  int32_t prompt_logprobs = -1;
  // With prompt_logprobs: also each prompt token's rank (PromptTokenLogprob::rank), a pass over
  // the vocabulary per token, which only vLLM's prompt_logprobs field shows (echo's logprobs
  // do not); otherwise rank stays 0.
  bool prompt_ranks = false;
  // Structured output: when set, each sample draws only tokens its constraint allows (the mask is
  // applied before penalties and sampling, and before logprobs, as vLLM: they are of the raw row
  // renormalised over the allowed tokens) and ends with kStop once the constraint is terminated.
  // Null: unconstrained.
  std::shared_ptr<const TokenConstraintFactory> constraint;
};

// Request::prompt_logprobs' range, [-1, 20]: latent::Error otherwise. Engine::Submit checks it, and
// so do the fronts that parse a request (generate::ParseRequestLine), to refuse it before submit.
void ValidatePromptLogprobs(int32_t prompt_logprobs);
// Request::max_tokens >= 0 and min_tokens in [0, max_tokens]: latent::Error naming the field
// otherwise. Engine::Submit checks them, and so does the Python SamplingParams when made.
void ValidateTokenCounts(int64_t max_tokens, int64_t min_tokens);

enum class FinishReason : uint8_t { kNone, kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason reason);

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// The logprob of one prompt token under the model's distribution at the position before it.
struct PromptTokenLogprob {
  int32_t token;
  float logprob;
  // With Request::prompt_ranks, vLLM's Logprob.rank (batched_count_greater_than): the tokens
  // whose logit is at least its own, itself included (ties rank it behind them); else 0.
  int64_t rank = 0;
  std::vector<TokenLogprob> top;  // Best first, with prompt_logprobs > 0.
};

// One event of one sample of a request: prompt logprobs, a new token, and/or its end.
struct RequestOutput {
  int64_t request_id = 0;
  int32_t sample = 0;        // 0 .. n-1
  bool has_token = false;
  int32_t token = -1;
  float logprob = 0.0f;                  // When logprobs were asked for.
  std::vector<TokenLogprob> top_logprobs;
  int64_t cached_prompt_tokens = -1;  // First token only: prompt tokens the prefix cache held.
  // With Request::prompt_logprobs (sample 0, before its first token): the logprobs of prompt
  // tokens [prompt_logprobs_start, prompt_logprobs_start + size) computed in this step. Prompt
  // token 0 has none; each token is reported once, in order, even across preemption.
  int64_t prompt_logprobs_start = 0;
  std::vector<PromptTokenLogprob> prompt_logprobs;
  FinishReason finish = FinishReason::kNone;  // kNone while running.
  // With kStop: the Request::stop_token_ids entry or the extra EOS id this token is, when that
  // ended the sample; -1 otherwise. vLLM's int stop_reason: the primary EOS
  // (GenerationConfig::primary_eos_id, the tokenizer's, listed or not), unless ignore_eos, ends it
  // first with stop_reason None, and vLLM adds the checkpoint's other EOS ids to stop_token_ids
  // (a grammar's end on an id that is neither gives -1 too).
  int32_t stop_token = -1;
  // With kStop: this token is an EOS id (unless ignore_eos) or a stop_token_ids entry, vLLM's
  // stop_terminated. Its text then stays out of the output and out of the stop-string search
  // unless include_stop_str_in_output, as vLLM's detokenizer does; its id is still output.
  bool stop_terminated = false;
  std::string error;                          // With kError.
};

// Called on the engine's thread; must not block for long.
using OutputCallback = std::function<void(const RequestOutput&)>;

}  // namespace latent::engine
