// Scheduler: which sequences run this step and how many of their tokens. Policy only: it sees
// sequences and the block pool (ids and counts), never tensors, so it is tested without weights.
//
// Order: running decodes, then running prefills, then waiting sequences in arrival order, under
// a token budget and a sequence cap. A prompt larger than the budget left is cut into chunks
// across steps. When blocks run out, the newest running sequence is preempted: its blocks are
// released and it waits again, to recompute its prompt and its generated tokens (cheap when
// prefix caching kept its blocks). A sequence that wants prompt logprobs takes no prefix hit over
// the positions whose logits it still needs, and its chunks are capped by the step's budget of
// prompt logits rows.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "cache/block_pool.h"
#include "engine/sequence.h"

namespace latent::engine {

struct SchedulerOptions {
  int64_t max_batch_tokens = 2048;
  int32_t max_seqs = 256;
  // Logits rows for prompt logprobs per step, over all sequences: each is a vocab-wide f32 row
  // (0.5 MB for DeepSeek V3), so a long scored prompt runs in chunks of this many positions.
  int64_t max_prompt_logits_rows = 512;
};

struct ScheduledChunk {
  Sequence* seq;
  int64_t num_tokens;  // Tokens [seq->num_computed, seq->num_computed + num_tokens) run now.
};

struct SchedulePlan {
  std::vector<ScheduledChunk> chunks;
  int64_t num_tokens = 0;
  int32_t num_preempted = 0;
  int64_t prefix_hit_tokens = 0;  // Prompt tokens served from cached blocks this step.
};

class Scheduler {
 public:
  Scheduler(SchedulerOptions options, cache::BlockPool& pool);

  // Queues a new sequence (status kWaiting) in arrival order.
  void AddWaiting(Sequence* seq);
  // Adds a sequence that already holds its blocks (a forked sample).
  void AddRunning(Sequence* seq);
  // Forgets a sequence (finished or cancelled); releases its blocks.
  void Remove(Sequence* seq);
  // Plans one step, allocating the blocks the chosen chunks need.
  SchedulePlan Schedule();

  const std::vector<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }

 private:
  void Preempt(Sequence* victim, SchedulePlan& plan);
  void InsertWaiting(Sequence* seq);

  SchedulerOptions options_;
  cache::BlockPool& pool_;
  std::vector<Sequence*> running_;  // In admission order.
  std::deque<Sequence*> waiting_;   // In arrival (id) order.
};

}  // namespace latent::engine
