#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "base/error.h"
#include "cache/block_pool.h"
#include "engine/batch_builder.h"
#include "engine/sequence.h"

namespace latent::engine {
namespace {

// Sequences built by hand, owned by the test; the scheduler only sees pointers.
class SchedulerTest : public ::testing::Test {
 protected:
  Sequence* NewSequence(int64_t id, std::vector<int32_t> prompt, uint32_t block_tokens = 4) {
    auto seq = std::make_unique<Sequence>(id, block_tokens);
    seq->tokens = std::move(prompt);
    seq->num_prompt = static_cast<int64_t>(seq->tokens.size());
    sequences_.push_back(std::move(seq));
    return sequences_.back().get();
  }

  static std::vector<int32_t> Prompt(int32_t first, int32_t n) {
    std::vector<int32_t> out(n);
    std::iota(out.begin(), out.end(), first);
    return out;
  }

  // What Engine::Commit does, without a model: the chunks' tokens become computed, full blocks
  // are registered, and a chunk that reached the end of its sequence samples one token.
  static void Commit(const SchedulePlan& plan, cache::BlockPool& pool, int32_t next_token = 1) {
    for (const ScheduledChunk& chunk : plan.chunks) {
      Sequence& seq = *chunk.seq;
      seq.num_computed += chunk.num_tokens;
      ASSERT_LE(seq.num_computed, seq.table.capacity());
      seq.table.RegisterComputed(pool, seq.tokens, seq.num_computed);
      if (seq.num_computed == static_cast<int64_t>(seq.tokens.size())) {
        seq.tokens.push_back(next_token);
      }
    }
  }

  static std::vector<int64_t> ChunkIds(const SchedulePlan& plan) {
    std::vector<int64_t> ids;
    for (const ScheduledChunk& c : plan.chunks) ids.push_back(c.seq->id);
    return ids;
  }
  static std::vector<int64_t> ChunkTokens(const SchedulePlan& plan) {
    std::vector<int64_t> n;
    for (const ScheduledChunk& c : plan.chunks) n.push_back(c.num_tokens);
    return n;
  }
  static std::vector<int64_t> IdsOf(const auto& seqs) {
    std::vector<int64_t> ids;
    for (const Sequence* s : seqs) ids.push_back(s->id);
    return ids;
  }

  std::vector<std::unique_ptr<Sequence>> sequences_;
};

using Ids = std::vector<int64_t>;

TEST_F(SchedulerTest, RejectsBadOptions) {
  cache::BlockPool pool(4, true);
  EXPECT_THROW(Scheduler({.max_batch_tokens = 0}, pool), Error);
  EXPECT_THROW(Scheduler({.max_seqs = 0}, pool), Error);
  EXPECT_THROW(Scheduler({.max_prompt_logits_rows = 0}, pool), Error);
  EXPECT_THROW(Scheduler({.max_draft_tokens = -1}, pool), Error);
  EXPECT_NO_THROW(Scheduler({.max_draft_tokens = 0}, pool));  // no drafts
}

TEST_F(SchedulerTest, EmptySchedulerPlansNothing) {
  cache::BlockPool pool(4, true);
  Scheduler scheduler({}, pool);
  EXPECT_FALSE(scheduler.HasWork());
  SchedulePlan plan = scheduler.Schedule();
  EXPECT_TRUE(plan.chunks.empty());
  EXPECT_EQ(plan.num_tokens, 0);
}

// A preempted chunk gives its tokens back to the step's budget at once: a sequence scheduled after
// the preemptions gets the whole budget. D decodes (1 token of the 8), P's prefill needs 2 new
// blocks of a full pool: D's block is not enough, so P preempts D and then itself; Q then takes
// all 8 tokens (not the 7 left before D's chunk was dropped) in the 2 blocks they freed.
TEST_F(SchedulerTest, PreemptedChunksGiveTheirBudgetBack) {
  cache::BlockPool pool(3, false);
  Scheduler scheduler({.max_batch_tokens = 8, .max_seqs = 16}, pool);
  Sequence* p = NewSequence(3, Prompt(0, 40));
  Sequence* q = NewSequence(0, Prompt(100, 40));
  Sequence* d = NewSequence(5, Prompt(200, 3));
  d->tokens.push_back(7);
  for (auto [seq, computed] : {std::pair{p, 4}, std::pair{q, 4}, std::pair{d, 3}}) {
    ASSERT_TRUE(seq->table.Grow(pool, computed));
    seq->num_computed = computed;
    seq->status = SequenceStatus::kRunning;
    scheduler.AddRunning(seq);  // admission order: P, Q, D
  }
  ASSERT_EQ(pool.NumAvailable(), 0);
  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.num_preempted, 2);
  EXPECT_EQ(ChunkIds(plan), (Ids{0}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{8}));
  EXPECT_EQ(plan.num_tokens, 8);
  EXPECT_EQ(IdsOf(scheduler.waiting()), (Ids{3, 5}));
}

TEST_F(SchedulerTest, DecodesThenRunningPrefillsThenWaitingInArrivalOrder) {
  cache::BlockPool pool(64, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 16}, pool);
  // A running prefill admitted before a running decode.
  Sequence* prefill = NewSequence(0, Prompt(0, 12));
  ASSERT_TRUE(prefill->table.Grow(pool, 4));
  prefill->num_computed = 4;
  scheduler.AddRunning(prefill);
  Sequence* decode = NewSequence(1, Prompt(100, 3));
  decode->tokens.push_back(7);
  ASSERT_TRUE(decode->table.Grow(pool, 3));
  decode->num_computed = 3;
  scheduler.AddRunning(decode);
  EXPECT_TRUE(prefill->is_prefill());
  EXPECT_FALSE(decode->is_prefill());
  // Waiting sequences queued out of order still run in arrival (id) order.
  Sequence* late = NewSequence(3, Prompt(300, 2));
  Sequence* early = NewSequence(2, Prompt(200, 5));
  scheduler.AddWaiting(late);
  scheduler.AddWaiting(early);
  EXPECT_EQ(IdsOf(scheduler.waiting()), (Ids{2, 3}));

  SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{1, 0, 2, 3}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{1, 8, 5, 2}));
  EXPECT_EQ(plan.num_tokens, 16);
  EXPECT_EQ(plan.num_preempted, 0);
  EXPECT_EQ(plan.prefix_hit_tokens, 0);
  EXPECT_TRUE(scheduler.waiting().empty());
  EXPECT_EQ(IdsOf(scheduler.running()), (Ids{0, 1, 2, 3}));  // Admission order.
  for (Sequence* s : {prefill, decode, late, early}) {
    EXPECT_EQ(s->status, SequenceStatus::kRunning);
  }
  // Every chunk has the blocks it writes.
  for (const ScheduledChunk& c : plan.chunks) {
    EXPECT_GE(c.seq->table.capacity(), c.seq->num_computed + c.num_tokens);
  }
}

TEST_F(SchedulerTest, LongPromptIsChunkedUnderTheTokenBudget) {
  cache::BlockPool pool(64, true);
  Scheduler scheduler({.max_batch_tokens = 8, .max_seqs = 16}, pool);
  Sequence* seq = NewSequence(0, Prompt(0, 20));
  scheduler.AddWaiting(seq);

  std::vector<int64_t> chunks;
  for (int step = 0; step < 3; ++step) {
    SchedulePlan plan = scheduler.Schedule();
    ASSERT_EQ(plan.chunks.size(), 1u);
    EXPECT_LE(plan.num_tokens, 8);
    EXPECT_EQ(seq->table.capacity(), (seq->num_computed + plan.chunks[0].num_tokens + 3) / 4 * 4)
        << "blocks only for what runs";
    chunks.push_back(plan.chunks[0].num_tokens);
    Commit(plan, pool);
  }
  EXPECT_EQ(chunks, (Ids{8, 8, 4}));
  EXPECT_EQ(seq->num_computed, 20);
  EXPECT_EQ(seq->num_generated(), 1);
  EXPECT_FALSE(seq->is_prefill());
  SchedulePlan decode = scheduler.Schedule();
  EXPECT_EQ(ChunkTokens(decode), (Ids{1}));
}

TEST_F(SchedulerTest, TokenBudgetIsSharedAndTheLastAdmittedPromptIsCut) {
  cache::BlockPool pool(64, true);
  Scheduler scheduler({.max_batch_tokens = 8, .max_seqs = 16}, pool);
  Sequence* a = NewSequence(0, Prompt(0, 5));
  Sequence* b = NewSequence(1, Prompt(10, 6));
  Sequence* c = NewSequence(2, Prompt(20, 2));
  for (Sequence* s : {a, b, c}) scheduler.AddWaiting(s);

  SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{5, 3}));
  EXPECT_EQ(plan.num_tokens, 8);
  EXPECT_EQ(IdsOf(scheduler.waiting()), (Ids{2}));
  Commit(plan, pool);

  // a decodes (1), b finishes its prompt (3), c is admitted with what is left (2).
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1, 2}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{1, 3, 2}));
  EXPECT_LE(plan.num_tokens, 8);
}

TEST_F(SchedulerTest, MaxSeqsIsRespected) {
  cache::BlockPool pool(64, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 2}, pool);
  for (int64_t id = 0; id < 3; ++id) scheduler.AddWaiting(NewSequence(id, Prompt(10 * id, 3)));
  SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1}));
  EXPECT_EQ(scheduler.running().size(), 2u);
  EXPECT_EQ(IdsOf(scheduler.waiting()), (Ids{2}));
  Commit(plan, pool);
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1}));
  EXPECT_EQ(IdsOf(scheduler.waiting()), (Ids{2}));

  scheduler.Remove(sequences_[0].get());
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{1, 2}));
}

TEST_F(SchedulerTest, PreemptsTheNewestRunningSequenceWhenBlocksRunOut) {
  cache::BlockPool pool(4, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 16}, pool);
  Sequence* a = NewSequence(0, Prompt(0, 4), 2);
  Sequence* b = NewSequence(1, Prompt(10, 4), 2);
  scheduler.AddWaiting(a);
  scheduler.AddWaiting(b);
  SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1}));
  EXPECT_EQ(pool.NumAvailable(), 0);
  Commit(plan, pool);

  // A later arrival that would fit in one block once b is gone.
  Sequence* c = NewSequence(2, Prompt(20, 1), 2);
  scheduler.AddWaiting(c);

  // a's decode at position 4 needs a third block: b (newest) is preempted.
  plan = scheduler.Schedule();
  EXPECT_EQ(plan.num_preempted, 1);
  EXPECT_EQ(ChunkIds(plan), (Ids{0}));
  EXPECT_EQ(plan.num_tokens, 1);
  EXPECT_EQ(b->status, SequenceStatus::kWaiting);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_TRUE(b->table.blocks().empty());
  EXPECT_EQ(b->tokens.size(), 5u);  // Its generated token is kept, to be recomputed.
  EXPECT_TRUE(b->is_prefill());
  EXPECT_EQ(IdsOf(scheduler.running()), (Ids{0}));
  // b waits ahead of the later arrival, and nobody was admitted in a step that preempted.
  EXPECT_EQ(IdsOf(scheduler.waiting()), (Ids{1, 2}));
  EXPECT_EQ(c->status, SequenceStatus::kWaiting);
  EXPECT_TRUE(c->table.blocks().empty());
  EXPECT_EQ(a->table.blocks().size(), 3u);
  EXPECT_EQ(pool.NumUsed(), 3);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerTest, NoWaitingSequenceIsAdmittedInAStepThatPreempted) {
  cache::BlockPool pool(4, false);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 16}, pool);
  // An older waiting sequence (id 1) that would fit in the blocks the preemption frees.
  Sequence* older = NewSequence(1, Prompt(10, 2), 2);
  scheduler.AddWaiting(older);
  Sequence* a = NewSequence(0, Prompt(0, 4), 2);  // Decodes position 4: needs a third block.
  a->tokens.push_back(9);
  ASSERT_TRUE(a->table.Grow(pool, 4));
  a->num_computed = 4;
  scheduler.AddRunning(a);
  Sequence* victim = NewSequence(2, Prompt(20, 3), 2);
  victim->tokens.push_back(9);
  ASSERT_TRUE(victim->table.Grow(pool, 4));
  victim->num_computed = 3;
  scheduler.AddRunning(victim);
  ASSERT_EQ(pool.NumAvailable(), 0);

  SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.num_preempted, 1);
  EXPECT_EQ(ChunkIds(plan), (Ids{0}));
  EXPECT_EQ(pool.NumAvailable(), 1);  // Enough for `older`, yet it waits for the next step.
  EXPECT_EQ(IdsOf(scheduler.waiting()), (Ids{1, 2}));
  EXPECT_EQ(older->status, SequenceStatus::kWaiting);
  EXPECT_TRUE(older->table.blocks().empty());
  EXPECT_EQ(older->num_computed, 0);

  Commit(plan, pool);
  plan = scheduler.Schedule();
  EXPECT_EQ(plan.num_preempted, 0);
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1}));
}

TEST_F(SchedulerTest, PreemptingAnAlreadyScheduledSequenceDropsItsChunk) {
  cache::BlockPool pool(3, false);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 16}, pool);
  // An old prefill (id 0) with 2 of 6 tokens computed, and a newer decode (id 1) that is
  // scheduled first (decodes go first) and then evicted for the prefill.
  Sequence* old_prefill = NewSequence(0, Prompt(0, 6), 2);
  ASSERT_TRUE(old_prefill->table.Grow(pool, 2));
  old_prefill->num_computed = 2;
  scheduler.AddRunning(old_prefill);
  Sequence* new_decode = NewSequence(1, Prompt(10, 2), 2);
  new_decode->tokens.push_back(5);
  ASSERT_TRUE(new_decode->table.Grow(pool, 3));
  new_decode->num_computed = 2;
  scheduler.AddRunning(new_decode);
  ASSERT_EQ(pool.NumAvailable(), 0);

  SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.num_preempted, 1);
  EXPECT_EQ(ChunkIds(plan), (Ids{0}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{4}));
  EXPECT_EQ(plan.num_tokens, 4);
  EXPECT_EQ(new_decode->status, SequenceStatus::kWaiting);
  EXPECT_EQ(new_decode->num_computed, 0);
  EXPECT_EQ(IdsOf(scheduler.waiting()), (Ids{1}));
  EXPECT_EQ(old_prefill->table.blocks().size(), 3u);
}

TEST_F(SchedulerTest, TheNewestSequencePreemptsItselfWhenNothingElseCanGo) {
  cache::BlockPool pool(3, false);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 16}, pool);
  Sequence* a = NewSequence(0, Prompt(0, 2), 2);  // Decodes position 2 into a block it holds.
  a->tokens.push_back(9);
  ASSERT_TRUE(a->table.Grow(pool, 4));
  a->num_computed = 2;
  scheduler.AddRunning(a);
  Sequence* b = NewSequence(1, Prompt(10, 2), 2);  // Decodes position 2: needs a new block.
  b->tokens.push_back(9);
  ASSERT_TRUE(b->table.Grow(pool, 2));
  b->num_computed = 2;
  scheduler.AddRunning(b);
  ASSERT_EQ(pool.NumAvailable(), 0);

  SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.num_preempted, 1);
  EXPECT_EQ(ChunkIds(plan), (Ids{0}));
  EXPECT_EQ(plan.num_tokens, 1);
  EXPECT_EQ(b->status, SequenceStatus::kWaiting);
  EXPECT_TRUE(b->table.blocks().empty());
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_EQ(a->status, SequenceStatus::kRunning);
  EXPECT_EQ(IdsOf(scheduler.waiting()), (Ids{1}));
  EXPECT_EQ(pool.NumAvailable(), 1);
}

TEST_F(SchedulerTest, AWaitingRequestThatDoesNotFitBlocksLaterOnes) {
  cache::BlockPool pool(4, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 16}, pool);
  Sequence* a = NewSequence(0, Prompt(0, 3), 2);
  scheduler.AddWaiting(a);
  SchedulePlan plan = scheduler.Schedule();
  Commit(plan, pool);  // a: 4 tokens, 3 computed, 2 blocks.
  ASSERT_EQ(pool.NumAvailable(), 2);

  Sequence* big = NewSequence(1, Prompt(10, 6), 2);    // 3 blocks.
  Sequence* small = NewSequence(2, Prompt(20, 2), 2);  // 1 block: would fit.
  scheduler.AddWaiting(big);
  scheduler.AddWaiting(small);
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0}));
  EXPECT_EQ(plan.num_preempted, 0);
  EXPECT_EQ(IdsOf(scheduler.waiting()), (Ids{1, 2}));
  EXPECT_EQ(big->num_computed, 0);
  EXPECT_TRUE(big->table.blocks().empty());
  EXPECT_TRUE(small->table.blocks().empty());
  EXPECT_EQ(pool.NumAvailable(), 2);
  EXPECT_EQ(pool.CheckConsistency(), "");

  // Once a is gone, both go in order.
  scheduler.Remove(a);
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{1, 2}));
}

TEST_F(SchedulerTest, PrefixHitStartsAfterTheMatchedTokens) {
  cache::BlockPool pool(32, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 16}, pool);
  Sequence* first = NewSequence(0, Prompt(0, 10));
  scheduler.AddWaiting(first);
  Commit(scheduler.Schedule(), pool);  // Registers blocks [0, 4) and [4, 8).

  Sequence* second = NewSequence(1, Prompt(0, 10));
  scheduler.AddWaiting(second);
  SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{1, 2}));
  EXPECT_EQ(plan.prefix_hit_tokens, 8);
  EXPECT_EQ(second->num_computed, 8);
  ASSERT_GE(second->table.blocks().size(), 3u);
  EXPECT_EQ(second->table.blocks()[0], first->table.blocks()[0]);
  EXPECT_EQ(second->table.blocks()[1], first->table.blocks()[1]);
  EXPECT_NE(second->table.blocks()[2], first->table.blocks()[2]);
  EXPECT_EQ(pool.ref_count(first->table.blocks()[0]), 2);
  Commit(plan, pool);

  // After both finish, a third with a prompt of exactly 8 of those tokens matches one block
  // from the cached, unowned blocks (never its last token).
  scheduler.Remove(first);
  scheduler.Remove(second);
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_GE(pool.NumCachedUnowned(), 2);
  Sequence* third = NewSequence(2, Prompt(0, 8));
  scheduler.AddWaiting(third);
  plan = scheduler.Schedule();
  EXPECT_EQ(plan.prefix_hit_tokens, 4);
  EXPECT_EQ(third->num_computed, 4);
  EXPECT_EQ(ChunkTokens(plan), (Ids{4}));

  scheduler.Remove(third);
  EXPECT_FALSE(scheduler.HasWork());
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.NumAvailable(), pool.num_blocks());
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerTest, PrefixHitCountsOnlyPromptTokensOfAPreemptedSequence) {
  cache::BlockPool pool(32, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 16}, pool);
  Sequence* seq = NewSequence(0, Prompt(0, 5), 2);
  scheduler.AddWaiting(seq);
  for (int i = 0; i < 4; ++i) Commit(scheduler.Schedule(), pool, 50 + i);
  ASSERT_EQ(seq->tokens.size(), 9u);  // 5 prompt + 4 generated, 8 computed.
  ASSERT_EQ(seq->num_computed, 8);

  // Preemption as Scheduler does it, then readmission: 8 of 9 tokens are cached.
  scheduler.Remove(seq);
  seq->num_computed = 0;
  scheduler.AddWaiting(seq);
  SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(seq->num_computed, 8);
  EXPECT_EQ(ChunkTokens(plan), (Ids{1}));
  EXPECT_EQ(plan.prefix_hit_tokens, 5);  // Only prompt tokens count.
}

TEST_F(SchedulerTest, PromptLogprobsTakeNoPrefixHitOverPositionsTheyNeed) {
  cache::BlockPool pool(32, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 16}, pool);
  Sequence* cached = NewSequence(0, Prompt(0, 10));
  scheduler.AddWaiting(cached);
  Commit(scheduler.Schedule(), pool);  // Registers blocks [0, 4) and [4, 8).
  scheduler.Remove(cached);

  // Wants every prompt logprob: no hit, the whole prompt runs.
  Sequence* scored = NewSequence(1, Prompt(0, 10));
  scored->prompt_logprobs_next = 1;
  scheduler.AddWaiting(scored);
  SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.prefix_hit_tokens, 0);
  EXPECT_EQ(scored->num_computed, 0);
  EXPECT_EQ(ChunkTokens(plan), (Ids{10}));
  scheduler.Remove(scored);

  // Preempted after reporting tokens 1..5: positions 0..4 need no logits, so the hit may cover
  // the first block (positions 0..3), not the second.
  Sequence* resumed = NewSequence(2, Prompt(0, 10));
  resumed->prompt_logprobs_next = 6;
  scheduler.AddWaiting(resumed);
  plan = scheduler.Schedule();
  EXPECT_EQ(resumed->num_computed, 4);
  EXPECT_EQ(ChunkTokens(plan), (Ids{6}));
  scheduler.Remove(resumed);

  // Done with its prompt logprobs: hits like any other.
  Sequence* done = NewSequence(3, Prompt(0, 10));
  done->prompt_logprobs_next = 10;
  scheduler.AddWaiting(done);
  plan = scheduler.Schedule();
  EXPECT_EQ(done->num_computed, 8);
  scheduler.Remove(done);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerTest, PromptLogitsRowsPerStepCapTheChunks) {
  cache::BlockPool pool(32, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 16, .max_prompt_logits_rows = 5}, pool);
  Sequence* a = NewSequence(0, Prompt(0, 10));  // Needs rows for positions 0..8.
  Sequence* b = NewSequence(1, Prompt(100, 4));  // Positions 0..2.
  Sequence* plain = NewSequence(2, Prompt(200, 3));
  a->prompt_logprobs_next = 1;
  b->prompt_logprobs_next = 1;
  for (Sequence* s : {a, b, plain}) scheduler.AddWaiting(s);
  SchedulePlan plan = scheduler.Schedule();
  // a takes all 5 rows; b would start with a row, so it waits, and plain behind it (FCFS).
  EXPECT_EQ(ChunkIds(plan), (Ids{0}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{5}));
  Commit(plan, pool);
  a->prompt_logprobs_next = 6;  // What the engine reports after the chunk.

  // a's rest: positions 5..9, of which 5..8 are rows (9 samples); b gets the one row left.
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1, 2}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{5, 1, 3}));
}

TEST_F(SchedulerTest, RemovingEverythingLeavesThePoolFull) {
  cache::BlockPool pool(16, true);
  Scheduler scheduler({.max_batch_tokens = 6, .max_seqs = 4}, pool);
  for (int64_t id = 0; id < 6; ++id) scheduler.AddWaiting(NewSequence(id, Prompt(0, 3 + id), 2));
  for (int step = 0; step < 5; ++step) Commit(scheduler.Schedule(), pool);
  EXPECT_GT(pool.NumUsed(), 0);
  for (auto& s : sequences_) scheduler.Remove(s.get());
  EXPECT_FALSE(scheduler.HasWork());
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.NumAvailable(), 16);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

// Random arrivals and finishes against a tight pool: every plan keeps the limits, every chunk
// has its blocks, block counts match the tables, and all work completes.
TEST_F(SchedulerTest, RandomWorkloadKeepsInvariantsAndFinishes) {
  constexpr int32_t kBlocks = 12;
  constexpr uint32_t kBlockTokens = 2;
  constexpr int64_t kBudget = 7;
  constexpr int32_t kMaxSeqs = 3;
  constexpr int64_t kSequences = 40;
  for (bool prefix_caching : {true, false}) {
    sequences_.clear();
    cache::BlockPool pool(kBlocks, prefix_caching);
    Scheduler scheduler({.max_batch_tokens = kBudget, .max_seqs = kMaxSeqs}, pool);
    std::mt19937 rng(7);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::vector<int64_t> max_len;  // By id: prompt + tokens to generate (fits the pool).
    int64_t next_id = 0, finished = 0, preemptions = 0, hits = 0;
    for (int step = 0; step < 5000; ++step) {
      if (next_id < kSequences && pick(0, 2) == 0) {
        const int32_t first = pick(0, 1) * 100;
        const int32_t length = pick(1, 9);
        Sequence* s = NewSequence(next_id++, Prompt(first, length), kBlockTokens);
        max_len.push_back(s->num_prompt + pick(1, 8));
        scheduler.AddWaiting(s);
      }
      if (!scheduler.HasWork()) {
        if (next_id == kSequences) break;
        continue;
      }
      const std::vector<int64_t> running_before = IdsOf(scheduler.running());
      SchedulePlan plan = scheduler.Schedule();
      preemptions += plan.num_preempted;
      hits += plan.prefix_hit_tokens;
      ASSERT_LE(plan.num_tokens, kBudget);
      ASSERT_LE(static_cast<int32_t>(plan.chunks.size()), kMaxSeqs);
      ASSERT_LE(static_cast<int32_t>(scheduler.running().size()), kMaxSeqs);
      int64_t sum = 0;
      for (const ScheduledChunk& c : plan.chunks) {
        sum += c.num_tokens;
        ASSERT_GT(c.num_tokens, 0);
        ASSERT_LE(c.num_tokens, c.seq->num_pending());
        ASSERT_EQ(c.seq->status, SequenceStatus::kRunning);
        ASSERT_GE(c.seq->table.capacity(), c.seq->num_computed + c.num_tokens);
        if (plan.num_preempted > 0) {  // Nobody admitted in a step that preempted.
          ASSERT_NE(std::find(running_before.begin(), running_before.end(), c.seq->id),
                    running_before.end());
        }
      }
      ASSERT_EQ(sum, plan.num_tokens);
      Commit(plan, pool, pick(0, 3));
      // Finish sequences that reached their length.
      for (const ScheduledChunk& c : plan.chunks) {
        if (static_cast<int64_t>(c.seq->tokens.size()) >= max_len[c.seq->id]) {
          scheduler.Remove(c.seq);
          c.seq->status = SequenceStatus::kFinished;
          ++finished;
        }
      }
      ASSERT_EQ(pool.CheckConsistency(), "");
      std::vector<int32_t> holders(kBlocks, 0);
      for (auto& s : sequences_) {
        if (s->status == SequenceStatus::kFinished) continue;
        for (cache::BlockId b : s->table.blocks()) ++holders[b];
        if (s->status == SequenceStatus::kWaiting) {
          ASSERT_TRUE(s->table.blocks().empty());
        }
      }
      for (cache::BlockId b = 0; b < kBlocks; ++b) ASSERT_EQ(pool.ref_count(b), holders[b]);
    }
    EXPECT_EQ(next_id, kSequences);
    EXPECT_EQ(finished, kSequences) << "prefix caching " << prefix_caching;
    EXPECT_FALSE(scheduler.HasWork());
    EXPECT_EQ(pool.NumUsed(), 0);
    EXPECT_GT(preemptions, 0) << "the pool should be tight enough to preempt";
    if (prefix_caching) {
      EXPECT_GT(hits, 0);
    } else {
      EXPECT_EQ(hits, 0);
    }
  }
}

TEST_F(SchedulerTest, CommitStepAdvancesNumComputedAndRegistersFullBlocks) {
  cache::BlockPool pool(8, true);
  Scheduler scheduler({.max_batch_tokens = 6, .max_seqs = 4}, pool);
  Sequence* seq = NewSequence(0, Prompt(10, 10));
  scheduler.AddWaiting(seq);
  const SchedulePlan plan = scheduler.Schedule();
  ASSERT_EQ(ChunkTokens(plan), (std::vector<int64_t>{6}));
  EXPECT_EQ(seq->num_computed, 0);
  scheduler.CommitStep(plan);
  EXPECT_EQ(seq->num_computed, 6);
  // The first block (4 tokens) is full and computed: a later identical prompt hits it.
  Sequence* twin = NewSequence(1, Prompt(10, 10));
  EXPECT_EQ(twin->table.MatchPrefix(pool, twin->tokens), 4);
  twin->table.Free(pool);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerTest, ForkSharesFullBlocksAndAsksForThePartialOneToBeCopied) {
  cache::BlockPool pool(8, false);
  Scheduler scheduler({.max_batch_tokens = 16, .max_seqs = 4}, pool);
  Sequence* first = NewSequence(0, Prompt(0, 6));  // 6 tokens: one full block, 2 in the next
  scheduler.AddWaiting(first);
  scheduler.CommitStep(scheduler.Schedule());
  ASSERT_EQ(first->num_computed, 6);
  Sequence* child = NewSequence(1, Prompt(0, 6));
  std::optional<BlockCopy> copy;
  ASSERT_TRUE(scheduler.Fork(child, *first, 6, copy));
  ASSERT_EQ(child->table.blocks().size(), 2u);
  EXPECT_EQ(child->table.blocks()[0], first->table.blocks()[0]);  // shared
  EXPECT_EQ(pool.ref_count(first->table.blocks()[0]), 2);
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(copy->from, first->table.blocks()[1]);
  EXPECT_EQ(copy->to, child->table.blocks()[1]);
  EXPECT_NE(copy->to, copy->from);
  EXPECT_EQ(copy->tokens, 2u);
  EXPECT_EQ(child->num_computed, 6);
  EXPECT_EQ(child->status, SequenceStatus::kRunning);
  EXPECT_EQ(IdsOf(scheduler.running()), (Ids{0, 1}));

  // A prompt of whole blocks needs no copy.
  Sequence* even = NewSequence(2, Prompt(0, 4));
  Sequence* even_child = NewSequence(3, Prompt(0, 4));
  scheduler.AddWaiting(even);
  scheduler.CommitStep(scheduler.Schedule());
  ASSERT_TRUE(scheduler.Fork(even_child, *even, 4, copy));
  EXPECT_FALSE(copy.has_value());
  for (auto& s : sequences_) scheduler.Remove(s.get());
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerTest, ForkWithoutAFreeBlockWaitsToComputeThePrompt) {
  cache::BlockPool pool(2, false);
  Scheduler scheduler({.max_batch_tokens = 16, .max_seqs = 4}, pool);
  Sequence* first = NewSequence(0, Prompt(0, 6));  // takes both blocks
  scheduler.AddWaiting(first);
  scheduler.CommitStep(scheduler.Schedule());
  Sequence* child = NewSequence(1, Prompt(0, 6));
  std::optional<BlockCopy> copy;
  EXPECT_FALSE(scheduler.Fork(child, *first, 6, copy));
  EXPECT_FALSE(copy.has_value());
  EXPECT_TRUE(child->table.blocks().empty());
  EXPECT_EQ(child->num_computed, 0);
  EXPECT_EQ(child->status, SequenceStatus::kWaiting);
  EXPECT_EQ(IdsOf(scheduler.waiting()), (Ids{1}));
  EXPECT_EQ(pool.ref_count(first->table.blocks()[0]), 1);  // the shared block was given back
  EXPECT_EQ(pool.CheckConsistency(), "");
}

// Speculative decoding: decodes that run a draft after their pending token.
class SchedulerDraftTest : public SchedulerTest {
 protected:
  // A running decode: `prompt_len` prompt tokens from `first`, all computed and in its blocks,
  // then the generated token `pending`, and `draft` guessed to follow it. With `window` > 0, also
  // sliding-window rows: a window table of 4-token blocks holding the prompt.
  Sequence* AddDecode(Scheduler& scheduler, cache::BlockPool& pool, int64_t id, int32_t first,
                      int32_t prompt_len, int32_t pending, std::vector<int32_t> draft,
                      int64_t window = 0) {
    Sequence* seq = NewSequence(id, Prompt(first, prompt_len));
    seq->tokens.push_back(pending);
    EXPECT_TRUE(seq->table.Grow(pool, prompt_len));
    if (window > 0) {
      seq->window_table.emplace(4);
      seq->window = window;
      EXPECT_TRUE(seq->window_table->Grow(pool, prompt_len));
    }
    seq->num_computed = prompt_len;
    seq->draft = std::move(draft);
    scheduler.AddRunning(seq);
    return seq;
  }

  static std::vector<int64_t> ChunkDrafts(const SchedulePlan& plan) {
    std::vector<int64_t> n;
    for (const ScheduledChunk& c : plan.chunks) n.push_back(c.num_draft);
    return n;
  }
};

TEST_F(SchedulerDraftTest, ADecodeRunsItsDraftAfterItsPendingToken) {
  cache::BlockPool pool(16, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 4}, pool);
  Sequence* seq = AddDecode(scheduler, pool, 0, 0, 5, 9, {1, 2, 3});
  ASSERT_EQ(seq->table.blocks().size(), 2u);

  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{4}));
  EXPECT_EQ(ChunkDrafts(plan), (Ids{3}));
  EXPECT_EQ(plan.num_tokens, 4);
  EXPECT_EQ(plan.num_preempted, 0);
  EXPECT_EQ(seq->num_computed, 5);
  EXPECT_EQ(seq->draft, (std::vector<int32_t>{1, 2, 3}));
  // Blocks for positions 0..8: the pending token at 5, the draft at 6..8.
  EXPECT_EQ(seq->table.blocks().size(), 3u);
  EXPECT_EQ(pool.NumUsed(), 3);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerDraftTest, DraftsTakeOnlyTheBudgetLeftAfterDecodesAndPrompts) {
  cache::BlockPool pool(32, true);
  Scheduler scheduler({.max_batch_tokens = 10, .max_seqs = 8}, pool);
  AddDecode(scheduler, pool, 0, 0, 3, 9, {1, 2, 3, 4, 5, 6, 7, 8});
  AddDecode(scheduler, pool, 1, 10, 3, 9, {1, 2, 3, 4, 5, 6, 7, 8});
  Sequence* prompt = NewSequence(2, Prompt(20, 5));
  prompt->draft = {1, 2};  // Ignored: it has a prompt to compute.
  scheduler.AddWaiting(prompt);

  // 1 + 1 for the decodes, 5 for the prompt (admitted whole), 3 left: the first decode's draft.
  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1, 2}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{4, 1, 5}));
  EXPECT_EQ(ChunkDrafts(plan), (Ids{3, 0, 0}));
  EXPECT_EQ(plan.num_tokens, 10);
  EXPECT_TRUE(scheduler.waiting().empty());
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerDraftTest, MaxDraftTokensCapsTheDraftsOfAllSequences) {
  cache::BlockPool pool(32, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 8, .max_draft_tokens = 5}, pool);
  AddDecode(scheduler, pool, 0, 0, 3, 9, {1, 2, 3});
  AddDecode(scheduler, pool, 1, 10, 3, 9, {1, 2, 3, 4});
  AddDecode(scheduler, pool, 2, 20, 3, 9, {1, 2, 3, 4});
  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1, 2}));
  EXPECT_EQ(ChunkDrafts(plan), (Ids{3, 2, 0}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{4, 3, 1}));
  EXPECT_EQ(plan.num_tokens, 8);
}

TEST_F(SchedulerDraftTest, ZeroMaxDraftTokensRunsNoDraft) {
  cache::BlockPool pool(32, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 8, .max_draft_tokens = 0}, pool);
  Sequence* seq = AddDecode(scheduler, pool, 0, 0, 3, 9, {1, 2, 3});
  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkTokens(plan), (Ids{1}));
  EXPECT_EQ(ChunkDrafts(plan), (Ids{0}));
  EXPECT_EQ(seq->table.blocks().size(), 1u);
}

TEST_F(SchedulerDraftTest, NoDraftWithoutAFreeBlockAndNothingIsPreemptedForOne) {
  cache::BlockPool pool(3, false);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 8}, pool);
  // a decodes position 7, the last of its 2 blocks: any draft token needs a third block.
  Sequence* a = AddDecode(scheduler, pool, 0, 0, 7, 9, {1, 2});
  // b (newer, so a preemption victim) decodes position 2 with room for 1 draft token in its
  // block.
  Sequence* b = AddDecode(scheduler, pool, 1, 10, 2, 9, {5});
  ASSERT_EQ(pool.NumAvailable(), 0);
  ASSERT_EQ(pool.NumUsed(), 3);

  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.num_preempted, 0);
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{1, 2}));
  EXPECT_EQ(ChunkDrafts(plan), (Ids{0, 1}));
  EXPECT_EQ(plan.num_tokens, 3);
  EXPECT_EQ(a->status, SequenceStatus::kRunning);
  EXPECT_EQ(b->status, SequenceStatus::kRunning);
  EXPECT_TRUE(scheduler.waiting().empty());
  EXPECT_EQ(a->table.blocks().size(), 2u);
  EXPECT_EQ(b->table.blocks().size(), 1u);
  EXPECT_EQ(pool.NumUsed(), 3);
  EXPECT_EQ(pool.NumAvailable(), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerDraftTest, NoDraftWhenOnlyOneOfItsTablesCouldGrow) {
  cache::BlockPool pool(5, false);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 8}, pool);
  Sequence* seq = AddDecode(scheduler, pool, 0, 0, 7, 9, {1, 2}, /*window=*/8);
  // Enough for one table's third block, not for both: no draft, and no block taken.
  ASSERT_EQ(pool.NumAvailable(), 1);

  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkTokens(plan), (Ids{1}));
  EXPECT_EQ(ChunkDrafts(plan), (Ids{0}));
  EXPECT_EQ(seq->table.blocks().size(), 2u);
  EXPECT_EQ(seq->window_table->blocks().size(), 2u);
  EXPECT_EQ(pool.NumUsed(), 4);
  EXPECT_EQ(pool.NumAvailable(), 1);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerDraftTest, AWindowCapsTheChunkWithItsDraft) {
  cache::BlockPool pool(16, false);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 8}, pool);
  // Chunks of at most 3 tokens: the pending one and 2 of the draft.
  Sequence* seq = AddDecode(scheduler, pool, 0, 0, 5, 9, {1, 2, 3, 4}, /*window=*/3);

  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkTokens(plan), (Ids{3}));
  EXPECT_EQ(ChunkDrafts(plan), (Ids{2}));
  EXPECT_EQ(seq->table.capacity(), 8);
  EXPECT_EQ(seq->window_table->capacity(), 8);
}

TEST_F(SchedulerDraftTest, NoDraftForASequenceStillInPrefill) {
  cache::BlockPool pool(32, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 8}, pool);
  // Its last prompt token pending: a chunk of 1 token that is still a prefill.
  Sequence* last = NewSequence(0, Prompt(0, 10));
  ASSERT_TRUE(last->table.Grow(pool, 9));
  last->num_computed = 9;
  last->draft = {1, 2};
  scheduler.AddRunning(last);
  ASSERT_TRUE(last->is_prefill());
  // Mid-prefill.
  Sequence* middle = NewSequence(1, Prompt(100, 10));
  ASSERT_TRUE(middle->table.Grow(pool, 4));
  middle->num_computed = 4;
  middle->draft = {1, 2};
  scheduler.AddRunning(middle);

  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkIds(plan), (Ids{0, 1}));
  EXPECT_EQ(ChunkTokens(plan), (Ids{1, 6}));
  EXPECT_EQ(ChunkDrafts(plan), (Ids{0, 0}));
  EXPECT_EQ(plan.num_tokens, 7);
  EXPECT_EQ(last->table.blocks().size(), 3u);
  EXPECT_EQ(middle->table.blocks().size(), 3u);
}

TEST_F(SchedulerDraftTest, CommitStepCountsThePendingTokenNotTheDraft) {
  cache::BlockPool pool(16, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 4}, pool);
  Sequence* seq = AddDecode(scheduler, pool, 0, 0, 7, 9, {1, 2, 3});
  const SchedulePlan plan = scheduler.Schedule();
  ASSERT_EQ(ChunkDrafts(plan), (Ids{3}));
  ASSERT_EQ(seq->table.blocks().size(), 3u);
  scheduler.CommitStep(plan);
  EXPECT_EQ(seq->num_computed, 8);
  EXPECT_EQ(seq->table.blocks().size(), 3u);  // The draft's blocks stay until CommitDraft.
  // Positions 0..7 (both full blocks) are computed and registered.
  Sequence* twin = NewSequence(1, seq->tokens);
  twin->tokens.push_back(1);
  EXPECT_EQ(twin->table.MatchPrefix(pool, twin->tokens), 8);
  twin->table.Free(pool);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerDraftTest, CommitDraftCountsAcceptedTokensAndReleasesTheRejectedOnesBlocks) {
  cache::BlockPool pool(16, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 4}, pool);
  Sequence* seq = AddDecode(scheduler, pool, 0, 0, 6, 9, {20, 21, 22, 23, 24, 25});
  const SchedulePlan plan = scheduler.Schedule();
  ASSERT_EQ(ChunkTokens(plan), (Ids{7}));
  ASSERT_EQ(ChunkDrafts(plan), (Ids{6}));
  // Positions 0..12: 4 blocks of 4.
  ASSERT_EQ(seq->table.blocks().size(), 4u);
  EXPECT_EQ(pool.NumUsed(), 4);
  EXPECT_EQ(pool.NumAvailable(), 12);
  scheduler.CommitStep(plan);
  ASSERT_EQ(seq->num_computed, 7);

  // The draws: 20 and 21 as drafted, then 30 instead of 22. Positions 7, 8 (tokens 20, 21)
  // count; 30 at position 9 is pending, in the third block.
  seq->tokens.insert(seq->tokens.end(), {20, 21, 30});
  scheduler.CommitDraft(seq, 2);
  EXPECT_EQ(seq->num_computed, 9);
  EXPECT_EQ(seq->table.blocks().size(), 3u);
  EXPECT_EQ(pool.NumUsed(), 3);
  EXPECT_EQ(pool.NumAvailable(), 13);
  // The second block (positions 4..7, with the first accepted token) is registered.
  Sequence* twin = NewSequence(1, seq->tokens);
  EXPECT_EQ(twin->table.MatchPrefix(pool, twin->tokens), 8);
  twin->table.Free(pool);
  EXPECT_EQ(pool.CheckConsistency(), "");

  // The next step decodes position 9 in the block it kept.
  seq->draft.clear();
  const SchedulePlan next = scheduler.Schedule();
  EXPECT_EQ(ChunkTokens(next), (Ids{1}));
  EXPECT_EQ(seq->table.blocks().size(), 3u);
}

TEST_F(SchedulerDraftTest, CommitDraftTrimsAWindowTableAndKeepsItsReleasedSlots) {
  cache::BlockPool pool(16, false);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 4}, pool);
  Sequence* seq = AddDecode(scheduler, pool, 0, 0, 10, 9, {20, 21, 22}, /*window=*/4);
  // Position 10 reads positions 7..10: the window's first block (0..3) is gone.
  ASSERT_EQ(seq->window_table->ReleaseBefore(pool, 7), 1);
  const SchedulePlan plan = scheduler.Schedule();
  ASSERT_EQ(ChunkDrafts(plan), (Ids{3}));  // the window caps the chunk at 4 tokens
  ASSERT_EQ(seq->window_table->blocks().size(), 4u);  // positions 10..13 reach a 4th block
  scheduler.CommitStep(plan);

  seq->tokens.insert(seq->tokens.end(), {30});  // the first draft token was wrong
  scheduler.CommitDraft(seq, 0);
  EXPECT_EQ(seq->num_computed, 11);
  ASSERT_EQ(seq->table.blocks().size(), 3u);
  ASSERT_EQ(seq->window_table->blocks().size(), 3u);
  // Position 11 reads 8..11: the second block went too (CommitStep), the third is held.
  EXPECT_EQ(seq->window_table->blocks()[0], cache::kNoBlock);
  EXPECT_EQ(seq->window_table->blocks()[1], cache::kNoBlock);
  EXPECT_NE(seq->window_table->blocks()[2], cache::kNoBlock);
  EXPECT_EQ(pool.NumUsed(), 4);  // as a decode without a draft would hold
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerDraftTest, CommitDraftOfNothingKeepsWhatADecodeWithoutADraftWouldHold) {
  cache::BlockPool pool(16, false);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 4}, pool);
  Sequence* seq = AddDecode(scheduler, pool, 0, 0, 7, 9, {20, 21, 22, 23});
  const SchedulePlan plan = scheduler.Schedule();
  ASSERT_EQ(ChunkDrafts(plan), (Ids{4}));
  ASSERT_EQ(seq->table.blocks().size(), 3u);  // Positions 0..11.
  scheduler.CommitStep(plan);
  seq->tokens.push_back(30);  // Not 20: the whole draft is rejected.
  scheduler.CommitDraft(seq, 0);
  EXPECT_EQ(seq->num_computed, 8);
  // Positions 0..7 fill 2 blocks; the pending token's block comes with the next step.
  EXPECT_EQ(seq->table.blocks().size(), 2u);
  EXPECT_EQ(pool.NumUsed(), 2);
  EXPECT_EQ(pool.NumAvailable(), 14);

  seq->draft.clear();
  const SchedulePlan next = scheduler.Schedule();
  EXPECT_EQ(ChunkTokens(next), (Ids{1}));
  EXPECT_EQ(seq->table.blocks().size(), 3u);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerDraftTest, ABatchRunsThePendingTokenThenTheDraftWithARowForEach) {
  cache::BlockPool pool(32, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 8, .max_draft_tokens = 3}, pool);
  AddDecode(scheduler, pool, 0, 0, 3, 7, {});                        // 7 at position 3
  Sequence* a = AddDecode(scheduler, pool, 1, 10, 5, 50, {60, 61});  // 50 at 5, then 6, 7
  AddDecode(scheduler, pool, 2, 20, 2, 9, {70, 71});                 // 9 at 2, one draft token
  scheduler.AddWaiting(NewSequence(3, {30, 31, 32}));

  const SchedulePlan plan = scheduler.Schedule();
  ASSERT_EQ(ChunkIds(plan), (Ids{0, 1, 2, 3}));
  ASSERT_EQ(ChunkTokens(plan), (Ids{1, 3, 2, 3}));
  ASSERT_EQ(ChunkDrafts(plan), (Ids{0, 2, 1, 0}));
  BuiltBatch batch;
  BuildBatch(plan, batch);
  const model::ForwardBatch& f = batch.forward;
  EXPECT_EQ(f.token_ids, (std::vector<int32_t>{7, 50, 60, 61, 9, 70, 30, 31, 32}));
  EXPECT_EQ(f.positions, (std::vector<int64_t>{3, 5, 6, 7, 2, 3, 0, 1, 2}));
  EXPECT_EQ(f.seq_slots, (std::vector<int32_t>{0, 1, 1, 1, 2, 2, 3, 3, 3}));
  EXPECT_EQ(f.context_lens, (std::vector<int64_t>{4, 8, 4, 3}));
  // Every token of a drafted chunk has a row; the prompt only its last token.
  EXPECT_EQ(f.logits_rows, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 8}));
  EXPECT_EQ(batch.logits_index, (std::vector<int32_t>{0, 1, 4, 6}));
  ASSERT_EQ(batch.prompt_logits.size(), 4u);
  for (const PromptLogitsRows& rows : batch.prompt_logits) EXPECT_EQ(rows.count, 0);
  ASSERT_EQ(batch.tables.size(), 4u);
  EXPECT_EQ(batch.tables[1], &a->table);
  EXPECT_GE(a->table.capacity(), 8);
}

TEST_F(SchedulerDraftTest, ADraftNeverEvictsACachedPromptAndTakesWhatItsBlocksHold) {
  cache::BlockPool pool(4, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 8}, pool);
  // A finished request's two full prompt blocks stay cached, held by nobody.
  Sequence* done = NewSequence(5, Prompt(40, 8));
  ASSERT_TRUE(done->table.Grow(pool, 8));
  done->table.RegisterComputed(pool, done->tokens, 8);
  done->table.Free(pool);
  ASSERT_EQ(pool.NumCachedUnowned(), 2);
  // A decode at position 5 of its 2 blocks (room up to position 7): a draft of 5 would need a
  // third block, which only evicting a cached block could give.
  Sequence* seq = AddDecode(scheduler, pool, 0, 0, 5, 9, {1, 2, 3, 4, 5});
  ASSERT_EQ(pool.NumAvailable(), 2);

  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkTokens(plan), (Ids{3}));
  EXPECT_EQ(ChunkDrafts(plan), (Ids{2}));  // positions 6 and 7
  EXPECT_EQ(seq->table.blocks().size(), 2u);
  EXPECT_EQ(pool.NumCachedUnowned(), 2);
  // The cached prompt still serves a hit.
  Sequence* again = NewSequence(6, Prompt(40, 9));
  EXPECT_EQ(again->table.MatchPrefix(pool, again->tokens), 8);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST_F(SchedulerDraftTest, ADraftTakesAFreeBlockBeforeItsSequenceNeedsIt) {
  cache::BlockPool pool(4, true);
  Scheduler scheduler({.max_batch_tokens = 100, .max_seqs = 8}, pool);
  Sequence* seq = AddDecode(scheduler, pool, 0, 0, 5, 9, {1, 2, 3, 4, 5});
  ASSERT_EQ(pool.NumAvailable(), 2);  // never used: free, not cached
  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunkDrafts(plan), (Ids{5}));  // positions 6 to 10: a third block
  EXPECT_EQ(seq->table.blocks().size(), 3u);
  EXPECT_EQ(pool.NumAvailable(), 1);
}

}  // namespace
}  // namespace latent::engine
