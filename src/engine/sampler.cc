#include "engine/sampler.h"

#include <algorithm>
#include <bit>
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

// The draw's mask: allowed_token_ids' (built once per request), intersected with the grammar's
// when there is one, word by word: the draw then has one mask, which min_tokens' rule (HoldOff)
// and the no-token check see whole.
std::vector<uint32_t> IntersectMasks(const std::vector<uint32_t>& ids, const uint32_t* grammar) {
  std::vector<uint32_t> mask(ids);
  for (size_t w = 0; w < mask.size(); ++w) mask[w] &= grammar[w];
  return mask;
}

// logit_bias, after the masks (-inf + bias stays -inf) and before the penalties, as vLLM's
// LogitBiasLogitsProcessor runs before its penalties.
void ApplyLogitBias(std::vector<float>& logits,
                    const std::vector<std::pair<int32_t, float>>& bias) {
  for (const auto& [t, b] : bias) logits[t] += b;
}

constexpr const char* kGrammarAllowsNone = "the structured-output constraint allows no next token";

// Disallowed tokens get -inf: probability 0 at any temperature, never the argmax (when one token
// is allowed). Penalties keep -inf at -inf.
void MaskDisallowed(std::vector<float>& logits, const uint32_t* allowed,
                    const char* none_left = kGrammarAllowsNone) {
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
  if (!any) Fail(none_left);
}

// min_tokens: whether the held-off ids go to -inf, which they do unless nothing else is allowed
// (a grammar that allows only EOS must still be able to end; without one, a vocabulary of only
// held-off ids). Counts bits, not logits: what the model gave them does not matter.
bool HoldOff(std::span<const int32_t> held, const uint32_t* allowed, int64_t vocab) {
  if (held.empty()) return false;
  std::vector<int32_t> ids;  // the distinct held-off ids the mask allows
  for (int32_t t : held) {
    if (t >= 0 && t < vocab && (allowed == nullptr || BitmaskAllows(allowed, t))) ids.push_back(t);
  }
  std::sort(ids.begin(), ids.end());
  const int64_t held_allowed = std::unique(ids.begin(), ids.end()) - ids.begin();
  if (allowed == nullptr) return held_allowed < vocab;
  int64_t count = 0;
  for (int64_t w = 0; w < BitmaskWords(vocab); ++w) {
    uint32_t word = allowed[w];
    if ((w + 1) * 32 > vocab) word &= (1u << (vocab & 31)) - 1u;  // bits past the vocabulary
    count += std::popcount(word);
    if (count > held_allowed) return true;
  }
  return false;
}

bool IsHeld(std::span<const int32_t> held, int32_t t) {
  return std::find(held.begin(), held.end(), t) != held.end();
}

// Greedy: the first index of the largest value (std::max_element's), on the fastest kernel.
int32_t Argmax(const float* v, int64_t n) {
  return static_cast<int32_t>(kernels::BestKernels().argmax(v, n));
}

int32_t Argmax(const std::vector<float>& v) {
  return Argmax(v.data(), static_cast<int64_t>(v.size()));
}

}  // namespace

bool HasNanOrPosInf(const float* x, int64_t n) {
  // !(v < inf) is true exactly for NaN and +inf. Fixed-length chunks with a branch-free OR inside
  // let the compiler vectorize at -O2 (its cheap cost model refuses loops of unknown length):
  // the check runs on every sampled row, a few microseconds for a 150k vocabulary.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr int64_t kChunk = 64;
  int64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    int bad = 0;
    for (int64_t j = 0; j < kChunk; ++j) bad |= x[i + j] < kInf ? 0 : 1;
    if (bad) return true;
  }
  for (; i < n; ++i) {
    if (!(x[i] < kInf)) return true;
  }
  return false;
}

void SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) Fail("temperature must be >= 0");
  if (top_k < 0) Fail("top_k must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) Fail("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) Fail("min_p must be in [0, 1]");
  // A floor as well as the server's ceiling: logit / 1e-40 overflows to +inf.
  if (!(repetition_penalty >= 0.01f && repetition_penalty <= 100.0f)) {
    Fail("repetition_penalty must be in [0.01, 100]");
  }
  if (!std::isfinite(presence_penalty) || std::abs(presence_penalty) > 2.0f) Fail("presence_penalty must be in [-2, 2]");
  if (!std::isfinite(frequency_penalty) || std::abs(frequency_penalty) > 2.0f) Fail("frequency_penalty must be in [-2, 2]");
  if (top_logprobs < -1 || top_logprobs > 20) Fail("top_logprobs must be in [0, 20]");
  if (n < 1 || n > 128) Fail("n must be in [1, 128]");
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) Fail("logit_bias token id ", id, " is outside the vocabulary (negative)");
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      Fail("logit_bias for token id ", id, " must be in [-100, 100], got ", bias);
    }
  }
  if (allowed_token_ids) {
    if (allowed_token_ids->empty()) Fail("allowed_token_ids must not be empty");
    for (int32_t id : *allowed_token_ids) {
      if (id < 0) Fail("allowed_token_ids token id ", id, " is outside the vocabulary (negative)");
    }
  }
}

SamplingTables BuildSamplingTables(const SamplingParams& p, int64_t vocab,
                                   std::span<const int32_t> also_allowed) {
  SamplingTables tables;
  // Ids outside the vocabulary are skipped (Engine::Submit refuses them; debug replays and tests
  // call the sampler directly). The map is ordered, so the ids come ascending.
  for (const auto& [t, bias] : p.logit_bias) {
    if (t >= 0 && t < vocab) tables.bias.emplace_back(t, bias);
  }
  if (p.allowed_token_ids) {
    tables.allowed.assign(BitmaskWords(vocab), 0u);
    auto allow = [&](int32_t t) {
      if (t >= 0 && t < vocab) tables.allowed[t >> 5] |= 1u << (t & 31);
    };
    for (int32_t t : *p.allowed_token_ids) allow(t);
    for (int32_t t : also_allowed) allow(t);
  }
  return tables;
}

SampledToken SampleNext(const float* raw, int64_t vocab, const Sequence& seq, const SamplingParams& p,
                        const uint32_t* allowed, std::span<const int32_t> held_off,
                        const SamplingTables* tables) {
  SampledToken out;
  // Direct callers (tests, debug replays) pass none: built here, as Engine::Submit would.
  SamplingTables own;
  if (tables == nullptr) {
    own = BuildSamplingTables(p, vocab);
    tables = &own;
  }
  const bool has_ids = !tables->allowed.empty();
  const bool penalties =
      p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  // The draw's mask: the grammar's, narrowed by allowed_token_ids. `allowed` stays the grammar's
  // alone, for the logprobs.
  std::vector<uint32_t> ids_mask;
  if (has_ids && allowed != nullptr) ids_mask = IntersectMasks(tables->allowed, allowed);
  const uint32_t* draw_allowed = !has_ids           ? allowed
                                 : allowed != nullptr ? ids_mask.data()
                                                      : tables->allowed.data();
  const bool hold = HoldOff(held_off, draw_allowed, vocab);
  std::vector<float> logits;
  if (p.temperature == 0.0f && !penalties && draw_allowed == nullptr && tables->bias.empty()) {
    // Greedy on the raw row, no copy. Holding ids off lowers only them, so a best token that is
    // not held off is the masked row's best too (the first of its value either way).
    const int32_t best = Argmax(raw, vocab);
    if (!hold || !IsHeld(held_off, best)) out.token = best;
  }
  if (out.token < 0) {
    logits.assign(raw, raw + vocab);
    if (draw_allowed != nullptr) {
      MaskDisallowed(logits, draw_allowed,
                     allowed == nullptr ? "allowed_token_ids allows no token"
                     : has_ids
                         ? "no token in allowed_token_ids is allowed by the structured-output "
                           "constraint"
                         : kGrammarAllowsNone);
    }
    if (hold) {
      for (int32_t t : held_off) {
        if (t >= 0 && t < vocab) logits[t] = -std::numeric_limits<float>::infinity();
      }
    }
    ApplyLogitBias(logits, tables->bias);
    ApplyPenalties(logits, seq, p);
  }
  // The row logprobs are of: the raw row, with a grammar's disallowed tokens at -inf, as vLLM
  // masks the logits before its sampler takes their logprobs (renormalised over the allowed
  // tokens; allowed_token_ids, logit_bias, penalties, min_tokens, temperature and the filters
  // never enter: vLLM v1's default logprobs_mode, raw_logprobs, takes the logprobs before any of
  // its logits processors run).
  const float* logprob_row = raw;
  std::vector<float> masked;
  if (p.top_logprobs >= 0 && allowed != nullptr && draw_allowed == allowed && !hold &&
      !penalties && tables->bias.empty()) {
    logprob_row = logits.data();  // the masked raw row already: no second copy
  } else if (p.top_logprobs >= 0 && allowed != nullptr) {
    masked.assign(raw, raw + vocab);
    MaskDisallowed(masked, allowed);
    logprob_row = masked.data();
  }
  // NaN or +inf in the row drawn from: a NaN is never the argmax and weighs nothing sensible in a
  // draw (which then fell through to the last token), +inf's weight is NaN. Fail the sample, as an
  // all-masked row does. The logprobs' row too when reported (their log-partition would be NaN),
  // though held-off ids may have hidden its bad entries from the draw.
  const float* drawn_row = logits.empty() ? raw : logits.data();
  if (HasNanOrPosInf(drawn_row, vocab) || (p.top_logprobs >= 0 && logprob_row != drawn_row &&
                                           HasNanOrPosInf(logprob_row, vocab))) {
    Fail(kNonFiniteLogitsError);
  }

  if (out.token >= 0) {
    // greedy on the raw row: done
  } else if (p.temperature == 0.0f) {
    out.token = Argmax(logits);
  } else {
    out.token =
        DrawFiltered(logits, draw_allowed, p, UniformDraw(seq.seed, seq.num_generated()));
  }

  if (p.top_logprobs >= 0) {
    const float log_z = LogPartition(logprob_row, vocab);
    out.logprob = logprob_row[out.token] - log_z;
    TopLogprobs(logprob_row, vocab, p.top_logprobs, log_z, out.top_logprobs);
  }
  return out;
}

void ValidatePromptLogprobs(int32_t prompt_logprobs) {
  if (prompt_logprobs < -1 || prompt_logprobs > 20) {
    Fail("prompt_logprobs must be in [0, 20], got ", prompt_logprobs);
  }
}

void ValidateTokenCounts(int64_t max_tokens, int64_t min_tokens) {
  if (max_tokens < 0) Fail("max_tokens must be at least 0, got ", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens) {
    Fail("min_tokens must be in [0, max_tokens (", max_tokens, ")], got ", min_tokens);
  }
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
