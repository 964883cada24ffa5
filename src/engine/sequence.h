// The engine's state of one sample of one request.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "cache/block_table.h"
#include "engine/ngram_draft.h"
#include "engine/request.h"

namespace latent::engine {

enum class SequenceStatus : uint8_t { kWaiting, kRunning, kFinished };

struct Sequence {
  // `table`: empty, from the engine's CacheManager (NewTable), which holds the block size.
  Sequence(int64_t id, cache::BlockTable table) : id(id), table(std::move(table)) {}
  Sequence(int64_t id, uint32_t block_tokens) : id(id), table(block_tokens) {}

  int64_t id;               // Unique; also the arrival order (a preempted sequence keeps it).
  int64_t request_id = 0;
  int32_t sample = 0;       // Index among the request's n samples.
  const Request* request = nullptr;  // Owned by the engine, alive while any sample runs.
  // The request's logit_bias and allowed_token_ids as the draw reads them, built once at submit
  // (owned with the request); null: SampleNext builds them from request->sampling.
  const SamplingTables* sampling_tables = nullptr;
  uint64_t seed = 0;        // This sample's generator seed.
  std::vector<int32_t> tokens;  // Prompt, then generated tokens.
  // Speculative decoding: tokens guessed to follow the pending last token (engine/ngram_draft.h),
  // set before a step; the step's ScheduledChunk says how many of them it runs and verifies.
  std::vector<int32_t> draft;
  DraftPace draft_pace;  // how long its next draft may be
  int64_t num_prompt = 0;
  int64_t num_computed = 0;     // Tokens whose rows are in the cache.
  // Positions below its bound for a layer's kind run in the expanded MLA form there
  // (model::ExpandedPositions of the prompt), the rest absorbed; prefix-cache blocks are keyed
  // with them too.
  cache::RegimeBounds expanded_below;
  int64_t prefix_hit_tokens = -1;  // Prompt tokens found in the prefix cache when first scheduled.
  // The next prompt token whose logprob is still to be reported: 1 at first (token 0 has none),
  // num_prompt once all are; the max when not asked for (only sample 0 of a prompt_logprobs
  // request asks: the other samples fork its computed prompt).
  int64_t prompt_logprobs_next = std::numeric_limits<int64_t>::max();
  cache::BlockTable table;
  // Sliding-window rows (caches with Retention::kWindow rows): their own block table (the
  // cache's group 1, from CacheManager::NewWindowTable), whose blocks before the next token's
  // window are released as the sequence advances; `window`: the widest window of those rows.
  std::optional<cache::BlockTable> window_table;
  int64_t window = 0;
  // The sequence's per-sequence state slot (hybrid models' linear-attention state), -1 while it
  // holds none; taken at admission and released with its blocks (Scheduler).
  int32_t state_slot = -1;
  // Structured output (Request::constraint): this sample's state, and the allowed-token bitmask
  // [BitmaskWords(vocab)] for its next draw, valid while mask_ready.
  std::unique_ptr<TokenConstraint> constraint;
  std::vector<uint32_t> bitmask;
  bool mask_ready = false;
  SequenceStatus status = SequenceStatus::kWaiting;

  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - num_prompt; }
  int64_t num_pending() const { return static_cast<int64_t>(tokens.size()) - num_computed; }
  bool is_prefill() const { return num_pending() > 1 || num_computed < num_prompt; }

  // Prompt logprobs need the logits of positions [prompt_logprobs_next - 1, num_prompt - 1):
  // position p gives the logprob of prompt token p + 1.
  bool wants_prompt_logits() const { return prompt_logprobs_next < num_prompt; }
  // How many positions of the chunk [from, from + count) need logits for prompt logprobs; they
  // are the contiguous range starting at PromptLogitsFrom(from).
  int64_t PromptLogitsFrom(int64_t from) const { return std::max(from, prompt_logprobs_next - 1); }
  int64_t PromptLogitsRows(int64_t from, int64_t count) const {
    if (!wants_prompt_logits()) return 0;
    return std::max<int64_t>(std::min(from + count, num_prompt - 1) - PromptLogitsFrom(from), 0);
  }
  // Tokens a prefix-cache match may look at: cached blocks have no logits, so a sequence that
  // still needs prompt logits may reuse only the positions before the first one it needs (none at
  // first; after a preemption, those already reported).
  int64_t prefix_match_limit() const {
    return wants_prompt_logits() ? prompt_logprobs_next : static_cast<int64_t>(tokens.size());
  }
};

}  // namespace latent::engine
