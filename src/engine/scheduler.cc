#include "engine/scheduler.h"

#include <algorithm>
#include <limits>
#include <span>

#include "base/error.h"

namespace latent::engine {
namespace {

// Shortens a chunk of `want` tokens from seq.num_computed so its prompt logits rows fit
// `rows_left`; 0 when the chunk would start with a row and none is left.
int64_t CapPromptLogits(const Sequence& seq, int64_t want, int64_t rows_left) {
  if (seq.PromptLogitsRows(seq.num_computed, want) <= rows_left) return want;
  return seq.PromptLogitsFrom(seq.num_computed) + rows_left - seq.num_computed;
}

// Grows every block table of `seq` to hold `tokens` positions; false when the pool runs out (a
// table may then have grown: its blocks stay with the sequence and count on the next try).
bool GrowTables(cache::BlockPool& pool, Sequence& seq, int64_t tokens) {
  if (!seq.table.Grow(pool, tokens)) return false;
  return !seq.window_table || seq.window_table->Grow(pool, tokens);
}

// Sliding-window retention: a sequence with window rows is scheduled chunks of at most `window`
// tokens, so a step holds the window blocks of less than two windows (CacheManager::
// capacity_tokens); ExtendWindowChunks then lengthens them where the step has room to spare.
int64_t ChunkCap(const Sequence& seq) {
  return seq.window_table ? std::max<int64_t>(1, seq.window) : std::numeric_limits<int64_t>::max();
}

void FreeTables(cache::BlockPool& pool, Sequence& seq) {
  seq.table.Free(pool);
  if (seq.window_table) seq.window_table->Free(pool);
}

// The positions the blocks a sequence holds have room for (every table's).
int64_t HeldPositions(const Sequence& seq) {
  const int64_t held = seq.table.capacity();
  return seq.window_table ? std::min(held, seq.window_table->capacity()) : held;
}

// Releases every table's blocks past those that positions [0, tokens) need.
void TrimTables(cache::BlockPool& pool, Sequence& seq, int64_t tokens) {
  auto trim = [&](cache::BlockTable& table) {
    const int64_t block = table.block_tokens();
    table.TruncateTo(pool, (tokens + block - 1) / block * block);
  };
  trim(seq.table);
  if (seq.window_table) trim(*seq.window_table);
}

}  // namespace

Scheduler::Scheduler(SchedulerOptions options, cache::BlockPool& pool, cache::SlotPool* slots)
    : options_(options), pool_(pool), slots_(slots) {
  if (options_.max_batch_tokens <= 0) Fail("max batch tokens must be positive");
  if (options_.max_seqs <= 0) Fail("max seqs must be positive");
  if (options_.max_prompt_logits_rows <= 0) Fail("max prompt logits rows must be positive");
  if (options_.max_draft_tokens < 0) Fail("max draft tokens must be at least 0");
}

void Scheduler::AddWaiting(Sequence* seq) {
  seq->status = SequenceStatus::kWaiting;
  InsertWaiting(seq);
}

void Scheduler::AddRunning(Sequence* seq) {
  seq->status = SequenceStatus::kRunning;
  running_.push_back(seq);
}

void Scheduler::InsertWaiting(Sequence* seq) {
  // Keep arrival order, so a preempted sequence goes back ahead of later arrivals.
  auto it = std::upper_bound(waiting_.begin(), waiting_.end(), seq,
                             [](const Sequence* a, const Sequence* b) { return a->id < b->id; });
  waiting_.insert(it, seq);
}

void Scheduler::ReleaseCache(Sequence* seq) {
  FreeTables(pool_, *seq);
  if (slots_ != nullptr && seq->state_slot >= 0) slots_->Release(seq->state_slot);
  seq->state_slot = -1;
}

void Scheduler::Remove(Sequence* seq) {
  ReleaseCache(seq);
  std::erase(running_, seq);
  std::erase(waiting_, seq);
}

int64_t Scheduler::Preempt(Sequence* victim, SchedulePlan& plan) {
  int64_t rows = 0;
  for (auto it = plan.chunks.begin(); it != plan.chunks.end(); ++it) {
    if (it->seq != victim) continue;
    plan.num_tokens -= it->num_tokens;
    rows = victim->PromptLogitsRows(victim->num_computed, it->num_tokens);
    plan.chunks.erase(it);
    break;
  }
  ReleaseCache(victim);  // The state is rebuilt with the rows, from position 0.
  victim->num_computed = 0;
  victim->draft.clear();
  std::erase(running_, victim);
  victim->status = SequenceStatus::kWaiting;
  InsertWaiting(victim);
  ++plan.num_preempted;
  return rows;
}

SchedulePlan Scheduler::Schedule() {
  SchedulePlan plan;
  int64_t budget = options_.max_batch_tokens;
  int64_t rows_left = options_.max_prompt_logits_rows;

  // Running sequences: decodes first, then prefills; each group in admission order.
  std::vector<Sequence*> order;
  for (Sequence* s : running_)
    if (!s->is_prefill()) order.push_back(s);
  for (Sequence* s : running_)
    if (s->is_prefill()) order.push_back(s);

  for (Sequence* seq : order) {
    if (seq->status != SequenceStatus::kRunning) continue;  // Preempted earlier in this loop.
    if (budget == 0 || static_cast<int32_t>(plan.chunks.size()) >= options_.max_seqs) break;
    const int64_t want =
        CapPromptLogits(*seq, std::min({seq->num_pending(), budget, ChunkCap(*seq)}), rows_left);
    if (want == 0) continue;
    bool scheduled = true;
    while (!GrowTables(pool_, *seq, seq->num_computed + want)) {
      // Free blocks by preempting the newest running sequence; maybe this one.
      Sequence* victim = *std::max_element(running_.begin(), running_.end(),
                                           [](const Sequence* a, const Sequence* b) { return a->id < b->id; });
      const bool self = victim == seq;
      // The victim's chunk, if it had one this step, gives back its budget and rows.
      rows_left += Preempt(victim, plan);
      budget = options_.max_batch_tokens - plan.num_tokens;
      if (self) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) continue;
    rows_left -= seq->PromptLogitsRows(seq->num_computed, want);
    plan.chunks.push_back({seq, want});
    plan.num_tokens += want;
    budget = options_.max_batch_tokens - plan.num_tokens;
  }

  // Waiting sequences, in arrival order; none while this step had to preempt (they would only
  // take the blocks just freed from older work).
  while (plan.num_preempted == 0 && !waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(plan.chunks.size()) < options_.max_seqs) {
    Sequence* seq = waiting_.front();
    const std::span<const int32_t> matchable = std::span(seq->tokens).first(seq->prefix_match_limit());
    int64_t hit = seq->table.MatchPrefix(pool_, matchable, seq->expanded_below);
    if (seq->window_table && hit > 0) {
      // Window rows: the hit also needs the cached window blocks of the positions the next token
      // reads (released ones may have been evicted); it ends where both groups' blocks end, and
      // shrinks until those blocks are all cached.
      const int64_t step = std::max<int64_t>(seq->table.block_tokens(), seq->window_table->block_tokens());
      hit = hit / step * step;
      while (hit > 0 && !seq->window_table->MatchWindow(pool_, matchable, hit, seq->window, seq->expanded_below)) {
        hit -= step;
      }
      seq->table.TruncateTo(pool_, hit);
    }
    seq->num_computed = hit;
    const int64_t want = CapPromptLogits(*seq, std::min({seq->num_pending(), budget, ChunkCap(*seq)}), rows_left);
    std::optional<cache::StateSlot> slot;
    if (want > 0 && slots_ != nullptr) {
      // A hybrid model's state starts at position 0: no prefix hit (the pool refuses them).
      LATENT_CHECK(hit == 0 && seq->state_slot < 0);
      slot = slots_->Acquire();
    }
    if (want == 0 || (slots_ != nullptr && !slot) || !GrowTables(pool_, *seq, seq->num_computed + want)) {
      if (slot) slots_->Release(*slot);
      FreeTables(pool_, *seq);
      seq->num_computed = 0;
      break;  // First come, first served: later arrivals do not jump the queue.
    }
    if (slot) seq->state_slot = *slot;
    plan.prefix_hit_tokens += std::min(hit, seq->num_prompt);
    if (seq->prefix_hit_tokens < 0) seq->prefix_hit_tokens = std::min(hit, seq->num_prompt);
    waiting_.pop_front();
    seq->status = SequenceStatus::kRunning;
    running_.push_back(seq);
    rows_left -= seq->PromptLogitsRows(seq->num_computed, want);
    plan.chunks.push_back({seq, want});
    plan.num_tokens += want;
    budget -= want;
  }
  ExtendWindowChunks(plan);
  AddDrafts(plan);
  return plan;
}

void Scheduler::ExtendWindowChunks(SchedulePlan& plan) {
  // After every decode, prefill and admission took its chunk (a window at most), so a longer
  // chunk never takes another sequence's budget or blocks, and never causes a preemption; it
  // grows as far as the step's budget, as any other model's chunk may. It takes free blocks, and
  // least recently used cached ones as any chunk does: unlike a draft, its tokens all run and
  // stay, and it grows only as far as the blocks reach, so nothing is evicted for a chunk that
  // does not run. (Free blocks alone would not do: with prefix caching every released block is
  // cached, and a warm pool has none.) Not in a step that preempted, as no admission is: the
  // blocks just freed are the preempted work's.
  if (plan.num_preempted > 0) return;
  for (ScheduledChunk& chunk : plan.chunks) {
    Sequence& seq = *chunk.seq;
    const int64_t budget = options_.max_batch_tokens - plan.num_tokens;
    if (budget <= 0) break;
    // Prompt logits keep their own cap (max_prompt_logits_rows): those chunks stay as they are.
    if (!seq.window_table || !seq.is_prefill() || seq.wants_prompt_logits()) continue;
    const int64_t most = std::min(seq.num_pending(), chunk.num_tokens + budget);
    const int32_t available = pool_.NumAvailable();  // free and cached-unowned blocks
    const auto fits = [&](int64_t tokens) {
      const int64_t end = seq.num_computed + tokens;
      return seq.table.BlocksNeeded(end) + seq.window_table->BlocksNeeded(end) <= available;
    };
    int64_t lo = chunk.num_tokens, hi = most;  // the longest chunk whose new blocks are there
    while (lo < hi) {
      const int64_t mid = hi - (hi - lo) / 2;
      if (fits(mid)) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    if (lo <= chunk.num_tokens) continue;
    LATENT_CHECK(GrowTables(pool_, seq, seq.num_computed + lo));
    plan.num_tokens += lo - chunk.num_tokens;
    chunk.num_tokens = lo;
  }
}

void Scheduler::AddDrafts(SchedulePlan& plan) {
  // Last, so that a draft never takes the budget or the blocks of a decode, a prefill or an
  // admission (under load there is no budget left, and no draft runs): a draft saves time only
  // where the step has room to spare.
  int64_t drafts_left = options_.max_draft_tokens;
  for (ScheduledChunk& chunk : plan.chunks) {
    Sequence& seq = *chunk.seq;
    const int64_t budget = std::min(options_.max_batch_tokens - plan.num_tokens, drafts_left);
    if (budget <= 0) break;
    if (seq.draft.empty() || seq.is_prefill() || chunk.num_tokens != 1) continue;
    int64_t draft = std::min({static_cast<int64_t>(seq.draft.size()), budget, ChunkCap(seq) - 1});
    if (draft <= 0) continue;
    // Only blocks nobody would miss: never a cached prompt's, which a rejected draft would have
    // evicted for nothing. Short of them, the draft takes what the sequence's blocks hold.
    const int64_t end = seq.num_computed + 1 + draft;
    const int32_t needed = seq.table.BlocksNeeded(end) +
                           (seq.window_table ? seq.window_table->BlocksNeeded(end) : 0);
    if (needed > pool_.NumAvailable() - pool_.NumCachedUnowned()) {
      draft = std::min(draft, HeldPositions(seq) - seq.num_computed - 1);
      if (draft <= 0) continue;
    } else {
      LATENT_CHECK(GrowTables(pool_, seq, end));
    }
    chunk.num_tokens += draft;
    chunk.num_draft = draft;
    plan.num_tokens += draft;
    drafts_left -= draft;
  }
}

void Scheduler::Advance(Sequence& seq, int64_t tokens) {
  seq.num_computed += tokens;
  LATENT_CHECK(seq.num_computed <= static_cast<int64_t>(seq.tokens.size()));
  seq.table.RegisterComputed(pool_, seq.tokens, seq.num_computed, seq.expanded_below);
  if (seq.window_table) {
    seq.window_table->RegisterComputed(pool_, seq.tokens, seq.num_computed, seq.expanded_below);
    // Sliding-window retention: the next token (position num_computed) reads positions from
    // num_computed - window + 1 on; blocks wholly before that are never read again.
    seq.window_table->ReleaseBefore(pool_, seq.num_computed - seq.window + 1);
  }
}

void Scheduler::CommitStep(const SchedulePlan& plan) {
  for (const ScheduledChunk& chunk : plan.chunks) Advance(*chunk.seq, chunk.own_tokens());
}

void Scheduler::CommitDraft(Sequence* seq, int64_t accepted) {
  LATENT_CHECK(accepted >= 0 && seq->status == SequenceStatus::kRunning);
  Advance(*seq, accepted);
  TrimTables(pool_, *seq, seq->num_computed);
}

bool Scheduler::Fork(Sequence* child, const Sequence& parent, int64_t tokens,
                     std::optional<BlockCopy>& copy) {
  copy.reset();
  if (parent.window_table) {
    // The parent's window blocks are not shared (its earlier ones may be released already): the
    // sample computes its prompt itself, as when no block is free for the copy.
    AddWaiting(child);
    return false;
  }
  if (slots_ != nullptr) {
    const std::optional<cache::StateSlot> slot = slots_->Acquire();
    if (!slot) {  // No slot for the state: compute the prompt later, like a new request.
      AddWaiting(child);
      return false;
    }
    child->state_slot = *slot;
  }
  const int64_t shared = child->table.ShareFullBlocks(pool_, parent.table, tokens);
  const uint32_t rest = static_cast<uint32_t>(tokens - shared);
  if (rest > 0) {
    if (!child->table.Grow(pool_, tokens)) {
      ReleaseCache(child);  // No block for the copy: recompute like a new request.
      AddWaiting(child);
      return false;
    }
    copy = BlockCopy{parent.table.blocks()[shared / parent.table.block_tokens()],
                     child->table.blocks().back(), rest};
  }
  child->num_computed = tokens;
  AddRunning(child);
  return true;
}

}  // namespace latent::engine
