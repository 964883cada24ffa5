// Per-request sampling settings. The order of application: penalties, temperature, top-k,
// top-p, min-p, then a draw from the request's own seeded generator.
#pragma once

#include <cstdint>
#include <optional>

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

  // Throws latent::Error naming the first invalid field.
  void Validate() const;
};

}  // namespace latent::engine
