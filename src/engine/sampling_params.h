// Per-request sampling settings. The order of application: allowed_token_ids (and a
// structured-output grammar's mask), min_tokens, logit_bias, penalties (vLLM v1's order so far),
// then temperature, top-k, top-p over what top-k kept, min-p over what top-p kept
// (engine/filtered_draw.h), and a draw from the request's own seeded generator. vLLM v1 applies
// min-p before top-k and top-p instead, so with min-p and top-k/top-p together the kept sets
// can differ.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace latent::engine {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax).
  int32_t top_k = 0;                // 0: off.
  float top_p = 1.0f;               // 1: off.
  float min_p = 0.0f;               // 0: off. Keeps tokens with p >= min_p * p_max.
  float repetition_penalty = 1.0f;  // transformers' form over prompt and output tokens.
  float presence_penalty = 0.0f;    // OpenAI's form over output tokens.
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;     // Same seed, same output, whatever else is in the batch.
  int32_t top_logprobs = -1;        // -1: no logprobs; 0: the sampled token's; n: and the n best.
  int32_t n = 1;                    // Parallel samples sharing the prompt's cache blocks.
  // OpenAI's logit_bias: token id -> bias in [-100, 100], added to the token's logit before the
  // penalties. A map: one bias per id (a later duplicate key wins, as in vLLM's dict).
  std::map<int32_t, float> logit_bias;
  // vLLM's allowed_token_ids: when set, a non-empty list; every other token gets probability 0,
  // but for a grammar's end (EOS), which a structured-output grammar keeps drawable where its
  // text may end. Engine::Submit sorts and de-duplicates it, and refuses min_tokens > 0 with a
  // list of only the ids min_tokens holds off.
  std::optional<std::vector<int32_t>> allowed_token_ids;
  // Neither bias nor allowed_token_ids enters the reported logprobs (vLLM v1's default
  // logprobs_mode "raw_logprobs" takes them before any logits processor).

  // Throws latent::Error naming the first invalid field. Token ids are checked for sign only:
  // Engine::Submit, which knows the vocabulary, checks their upper bound.
  void Validate() const;
};

// A request's top_k as every front takes it (the server's requests and request lines, so also
// latent.LLM): -1 (vLLM's spelling of off) and 0 are off, 0 here; a positive k past int32's range
// is int32's most, which keeps every token of any vocabulary as k itself would. nullopt below -1,
// which the front refuses in its own words with kTopKRange. (generation_config.json's top_k,
// read in model/, below this header's layer, is held to the same rule by SamplingDefaults::Check.)
inline constexpr const char* kTopKRange = "must be -1 (off), 0 (off) or positive";
inline std::optional<int32_t> TopKFromRequest(int64_t top_k) {
  if (top_k < -1) return std::nullopt;
  return static_cast<int32_t>(
      std::clamp<int64_t>(top_k, 0, std::numeric_limits<int32_t>::max()));
}

// logit_bias and allowed_token_ids in the form a draw reads them (BuildSamplingTables), built once
// per request by Engine::Submit: walking a map and a list of ids (of any length: a client may
// repeat an id millions of times) for every row at every step stalled the whole batch.
struct SamplingTables {
  std::vector<std::pair<int32_t, float>> bias;  // ascending ids, each in the vocabulary
  std::vector<uint32_t> allowed;  // BitmaskWords(vocab) words; empty: no allowed_token_ids
};

}  // namespace latent::engine
