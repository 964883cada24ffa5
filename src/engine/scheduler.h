// Scheduler: which sequences run this step and how many of their tokens. Policy only: it sees
// sequences and the block pool (ids and counts), never tensors, so it is tested without weights.
// It is the only code that changes block tables, the pool and num_computed: Schedule grows and
// preempts, CommitStep advances what a step computed, Fork shares a prompt's blocks, Remove frees.
//
// Order: running decodes, then running prefills, then waiting sequences in arrival order, under
// a token budget and a sequence cap. A prompt larger than the budget left is cut into chunks
// across steps. When blocks run out, the newest running sequence is preempted: its blocks are
// released and it waits again, to recompute its prompt and its generated tokens (cheap when
// prefix caching kept its blocks). A sequence that wants prompt logprobs takes no prefix hit over
// the positions whose logits it still needs, and its chunks are capped by the step's budget of
// prompt logits rows.
//
// Speculative decoding: a decode may run its draft tokens (Sequence::draft) after its pending
// token, from the budget left once everything else is scheduled, and only into blocks that are
// free (never a cached prompt's), else into the room left in the blocks it holds: a draft never
// preempts, never evicts, never takes another sequence's place. Its rows count as computed only
// once the engine has verified them (CommitDraft), which also gives back the blocks of rejected
// draft tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "cache/block_pool.h"
#include "cache/state_slots.h"
#include "engine/sequence.h"

namespace latent::engine {

struct SchedulerOptions {
  int64_t max_batch_tokens = 2048;
  int32_t max_seqs = 256;
  // Logits rows for prompt logprobs per step, over all sequences: each is a vocab-wide f32 row
  // (0.5 MB for DeepSeek V3), so a long scored prompt runs in chunks of this many positions.
  int64_t max_prompt_logits_rows = 512;
  // Draft tokens per step, over all sequences: each is a logits row too.
  int64_t max_draft_tokens = 256;
};

struct ScheduledChunk {
  Sequence* seq;
  // Tokens [seq->num_computed, seq->num_computed + num_tokens) run now; of a decode with a
  // draft, its pending token then draft[0, num_draft) (num_tokens = 1 + num_draft).
  int64_t num_tokens;
  int64_t num_draft = 0;
  // The sequence's own tokens among them (not the draft's).
  int64_t own_tokens() const { return num_tokens - num_draft; }
};

struct SchedulePlan {
  std::vector<ScheduledChunk> chunks;
  int64_t num_tokens = 0;
  int32_t num_preempted = 0;
  int64_t prefix_hit_tokens = 0;  // Prompt tokens served from cached blocks this step.
};

// Rows the caller copies between blocks (bytes are not the scheduler's business): the first
// `tokens` positions of block `from` into block `to`.
struct BlockCopy {
  cache::BlockId from, to;
  uint32_t tokens;
};

class Scheduler {
 public:
  // `slots`: the per-sequence state slots of a hybrid model (null: none). A sequence then also
  // needs a slot to be admitted (or forked), and gives it back with its blocks.
  Scheduler(SchedulerOptions options, cache::BlockPool& pool, cache::SlotPool* slots = nullptr);

  // Queues a new sequence (status kWaiting) in arrival order.
  void AddWaiting(Sequence* seq);
  // Adds a sequence that already holds its blocks (a forked sample).
  void AddRunning(Sequence* seq);
  // Forgets a sequence (finished or cancelled); releases its blocks.
  void Remove(Sequence* seq);
  // Plans one step, allocating the blocks the chosen chunks need.
  SchedulePlan Schedule();
  // After the step of `plan` ran: each chunk's tokens are computed (num_computed advances) and
  // the full blocks among them are registered for prefix caching. Draft tokens are not: they
  // count once verified (CommitDraft).
  void CommitStep(const SchedulePlan& plan);
  // After CommitStep, for a chunk that ran a draft: its first `accepted` draft tokens proved to
  // be the sequence's next tokens (now in seq->tokens), so their rows count as computed; the
  // blocks past the computed rows (those of rejected draft tokens) go back to the pool, which
  // then holds what it would hold had the sequence run without a draft.
  void CommitDraft(Sequence* seq, int64_t accepted);
  // Gives `child` (a sample that never ran) the first `tokens` computed positions of `parent`:
  // it shares parent's full blocks and takes a fresh block for the partial last one, whose rows
  // the caller copies (`copy`), and runs from there. With no block free it waits instead, to
  // compute the prompt itself. Returns whether it was forked.
  // On a hybrid model the child also gets a state slot, whose bytes the caller copies from the
  // parent's (the state after `tokens` positions, which the parent holds at the fork).
  bool Fork(Sequence* child, const Sequence& parent, int64_t tokens, std::optional<BlockCopy>& copy);

  const std::vector<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }

 private:
  // Sends `victim` back to the waiting queue, its blocks freed and its chunk of `plan` (if
  // any) dropped; returns the prompt-logit rows that chunk had taken.
  int64_t Preempt(Sequence* victim, SchedulePlan& plan);
  // num_computed advances by `tokens`; full blocks register, window blocks out of reach go.
  void Advance(Sequence& seq, int64_t tokens);
  // Lets the decodes of `plan` run their drafts, in plan order, from the budget left after
  // everything else, capped by max_draft_tokens, into free blocks only (else the room in the
  // sequence's own blocks).
  void AddDrafts(SchedulePlan& plan);
  // Lengthens the window sequences' prefill chunks of the plan past their window with the budget
  // and blocks left; never preempts. A window sequence's own share is a chunk of its window
  // (CacheManager::capacity_tokens reserves the window blocks of two windows, so a sequence alone
  // always progresses); with chunks of the window alone, a small window (dots3_note's 512) cut a
  // long prompt into many more chunks than other models run, and every chunk re-expands the
  // full-attention layers' cached latents (dots3_note's 8k prefill ran 27% slower,
  // docs/performance.md, wave 2 session 31). A step then holds the window blocks of the chunk.
  void ExtendWindowChunks(SchedulePlan& plan);
  void InsertWaiting(Sequence* seq);
  // Frees the sequence's blocks and its state slot.
  void ReleaseCache(Sequence* seq);

  SchedulerOptions options_;
  cache::BlockPool& pool_;
  cache::SlotPool* slots_;
  std::vector<Sequence*> running_;  // In admission order.
  std::deque<Sequence*> waiting_;   // In arrival (id) order.
};

}  // namespace latent::engine
