#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "base/error.h"
#include "engine/filtered_draw.h"
#include "engine/logprobs.h"
#include "engine/token_constraint.h"
#include "kernels/kernel_table.h"

namespace latent::engine {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from the (seed, step) pair.
double UniformDraw(uint64_t seed, int64_t step) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(step));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

void ApplyPenalties(std::vector<float>& logits, const Sequence& seq, const SamplingParams& p) {
  if (p.repetition_penalty != 1.0f) {
    // transformers' RepetitionPenaltyLogitsProcessor: over prompt and output, once per token.
    std::vector<bool> seen(logits.size(), false);
    for (int32_t t : seq.tokens) {
      if (seen[t]) continue;
      seen[t] = true;
      logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty : logits[t] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    // OpenAI's form: over generated tokens only.
    std::unordered_map<int32_t, int32_t> counts;
    for (int64_t i = seq.num_prompt; i < static_cast<int64_t>(seq.tokens.size()); ++i) ++counts[seq.tokens[i]];
    for (const auto& [token, count] : counts) {
      logits[token] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
    }
  }
}

// Disallowed tokens get -inf: probability 0 at any temperature, never the argmax (when one token
// is allowed). Penalties keep -inf at -inf.
void MaskDisallowed(std::vector<float>& logits, const uint32_t* allowed) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  bool any = false;
  for (int64_t w = 0; w < BitmaskWords(vocab); ++w) {
    const uint32_t word = allowed[w];
    if (word == ~0u && (w + 1) * 32 <= vocab) {
      any = true;
      continue;
    }
    const int64_t end = std::min<int64_t>(vocab, (w + 1) * 32);
    for (int64_t t = w * 32; t < end; ++t) {
      if ((word >> (t & 31)) & 1u) {
        any = true;
      } else {
        logits[t] = -std::numeric_limits<float>::infinity();
      }
    }
  }
  if (!any) Fail("the structured-output constraint allows no next token");
}

// Greedy: the first index of the largest value (std::max_element's), on the fastest kernel.
int32_t Argmax(const float* v, int64_t n) {
  return static_cast<int32_t>(kernels::BestKernels().argmax(v, n));
}

int32_t Argmax(const std::vector<float>& v) {
  return Argmax(v.data(), static_cast<int64_t>(v.size()));
}

}  // namespace

void SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) Fail("temperature must be >= 0");
  if (top_k < 0) Fail("top_k must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) Fail("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) Fail("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) Fail("repetition_penalty must be > 0");
  if (!std::isfinite(presence_penalty) || std::abs(presence_penalty) > 2.0f) Fail("presence_penalty must be in [-2, 2]");
  if (!std::isfinite(frequency_penalty) || std::abs(frequency_penalty) > 2.0f) Fail("frequency_penalty must be in [-2, 2]");
  if (top_logprobs < -1 || top_logprobs > 20) Fail("top_logprobs must be in [0, 20]");
  if (n < 1 || n > 128) Fail("n must be in [1, 128]");
}

SampledToken SampleNext(const float* raw, int64_t vocab, const Sequence& seq, const SamplingParams& p,
                        const uint32_t* allowed) {
  SampledToken out;
  const bool penalties =
      p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  std::vector<float> logits;
  if (p.temperature == 0.0f && !penalties && allowed == nullptr) {
    out.token = Argmax(raw, vocab);  // greedy on the raw row: no copy
  } else {
    logits.assign(raw, raw + vocab);
    if (allowed != nullptr) MaskDisallowed(logits, allowed);
    ApplyPenalties(logits, seq, p);
  }

  if (out.token >= 0) {
    // greedy without penalties: done
  } else if (p.temperature == 0.0f) {
    out.token = Argmax(logits);
  } else {
    out.token = DrawFiltered(logits, allowed, p, UniformDraw(seq.seed, seq.num_generated()));
  }

  if (p.top_logprobs >= 0) {
    const float log_z = LogPartition(raw, vocab);
    out.logprob = raw[out.token] - log_z;
    TopLogprobs(raw, vocab, p.top_logprobs, log_z, out.top_logprobs);
  }
  return out;
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

}  // namespace latent::engine
