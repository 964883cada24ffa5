// Sliding-window retention: a sequence with window rows holds a second block table (retention
// group 1) whose blocks before the next token's window go back to the pool as it advances, while
// its full-attention table keeps every block; prefix hits and forks stay safe; preemption frees
// both tables. Also the grouped layout of the blocks and the view's addressing.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "cache/block_pool.h"
#include "cache/block_table.h"
#include "cache/cache_layout.h"
#include "cache/cache_storage.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"

namespace latent {
namespace {

using engine::Scheduler;
using engine::SchedulePlan;
using engine::Sequence;

constexpr uint32_t kBlock = 4;
constexpr int64_t kWindow = 6;

std::unique_ptr<Sequence> WindowSequence(int64_t id, int32_t prompt_len, int32_t first_token = 100) {
  auto seq = std::make_unique<Sequence>(id, kBlock);
  seq->tokens.resize(prompt_len);
  std::iota(seq->tokens.begin(), seq->tokens.end(), first_token);
  seq->num_prompt = prompt_len;
  seq->window_table = cache::BlockTable(kBlock);
  seq->window_table->set_root_hash(0x77696e646f77ull);  // as the engine keys window blocks apart
  seq->window = kWindow;
  return seq;
}

// Engine::Commit without a model: one more token once a chunk reached the end.
void Commit(Scheduler& scheduler, const SchedulePlan& plan) {
  scheduler.CommitStep(plan);
  for (const auto& chunk : plan.chunks) {
    Sequence& seq = *chunk.seq;
    if (seq.num_computed == static_cast<int64_t>(seq.tokens.size())) seq.tokens.push_back(7);
  }
}

int32_t Held(const cache::BlockTable& t) { return t.NumHeld(); }

TEST(BlockTableWindow, ReleaseBeforeFreesWholeBlocksOnly) {
  cache::BlockPool pool(8, false);
  cache::BlockTable table(kBlock);
  ASSERT_TRUE(table.Grow(pool, 14));  // 4 blocks
  EXPECT_EQ(table.ReleaseBefore(pool, 3), 0);  // block 0 still holds position 3
  EXPECT_EQ(table.ReleaseBefore(pool, 9), 2);  // positions 0..7: blocks 0 and 1
  EXPECT_EQ(table.blocks()[0], cache::kNoBlock);
  EXPECT_EQ(table.blocks()[1], cache::kNoBlock);
  EXPECT_NE(table.blocks()[2], cache::kNoBlock);
  EXPECT_EQ(table.NumHeld(), 2);
  EXPECT_EQ(pool.NumUsed(), 2);
  EXPECT_EQ(table.ReleaseBefore(pool, 9), 0);  // idempotent
  ASSERT_TRUE(table.Grow(pool, 20));           // grows after the released slots
  EXPECT_EQ(table.blocks().size(), 5u);
  table.Free(pool);
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(WindowRetention, DecodeHoldsWindowBlocksAndKeepsFullBlocks) {
  cache::BlockPool pool(64, true);
  Scheduler scheduler({.max_batch_tokens = 64}, pool);
  auto seq = WindowSequence(0, 10);
  scheduler.AddWaiting(seq.get());
  int32_t peak_window = 0;
  for (int step = 0; step < 60; ++step) {
    const SchedulePlan plan = scheduler.Schedule();
    ASSERT_EQ(plan.chunks.size(), 1u);
    // Every position the step reads is held: the window of its first token up to its last.
    const int64_t first = std::max<int64_t>(0, seq->num_computed - kWindow + 1);
    const int64_t end = seq->num_computed + plan.chunks[0].num_tokens;
    for (int64_t p = first; p < end; ++p) {
      ASSERT_NE(seq->window_table->blocks().at(p / kBlock), cache::kNoBlock) << "position " << p;
    }
    peak_window = std::max(peak_window, Held(*seq->window_table));
    Commit(scheduler, plan);
  }
  // The prompt in one chunk (a chunk may exceed the window: ExtendWindowChunks), 59 decodes.
  EXPECT_EQ(seq->num_computed, 10 + 59);
  // Full-attention rows: every block of the context stays.
  EXPECT_EQ(Held(seq->table), (seq->num_computed + kBlock - 1) / kBlock);
  for (cache::BlockId b : seq->table.blocks()) EXPECT_NE(b, cache::kNoBlock);
  // Window rows: O(window) blocks, not O(context); during the prompt at most the prompt's.
  EXPECT_LE(Held(*seq->window_table), (kWindow + kBlock - 1) / kBlock + 1);
  EXPECT_LE(peak_window, (10 + kBlock - 1) / kBlock + 1);
  EXPECT_EQ(pool.NumUsed(), Held(seq->table) + Held(*seq->window_table));
  scheduler.Remove(seq.get());
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

// A window sequence's prefill chunk passes its window (as far as the budget goes) only with the
// budget and the blocks left after every sequence took its share (free ones, then cached ones
// nobody holds, as far as they reach), and never by preempting. 100 prompt tokens in one chunk
// need 25 full and 25 window blocks.
TEST(WindowRetention, AChunkPastTheWindowTakesTheBudgetAndBlocksLeft) {
  // The whole prompt in one chunk, 16x the window; and past 2,048 tokens (once a cap of its own)
  // where the budget allows it.
  for (auto [blocks, budget, prompt] : {std::tuple{50, 256, 100}, std::tuple{1300, 4096, 2500}}) {
    cache::BlockPool pool(blocks, false);
    Scheduler scheduler({.max_batch_tokens = budget}, pool);
    auto seq = WindowSequence(0, prompt);
    scheduler.AddWaiting(seq.get());
    const SchedulePlan plan = scheduler.Schedule();
    ASSERT_EQ(plan.chunks.size(), 1u);
    EXPECT_EQ(plan.chunks[0].num_tokens, prompt);
    EXPECT_EQ(plan.num_tokens, prompt);
    scheduler.Remove(seq.get());
  }
  {
    cache::BlockPool pool(50, false);
    Scheduler scheduler({.max_batch_tokens = 50}, pool);  // the budget caps it
    auto seq = WindowSequence(0, 100);
    auto other = WindowSequence(1, 8, 500);
    scheduler.AddWaiting(seq.get());
    scheduler.AddWaiting(other.get());
    const SchedulePlan plan = scheduler.Schedule();
    ASSERT_EQ(plan.chunks.size(), 2u);
    // other keeps its share, a window (6 of its 8); seq takes the rest of the budget.
    EXPECT_EQ(plan.chunks[1].num_tokens, kWindow);
    EXPECT_EQ(plan.chunks[0].num_tokens, 50 - kWindow);
    EXPECT_EQ(plan.num_tokens, 50);
    scheduler.Remove(seq.get());
    scheduler.Remove(other.get());
  }
  cache::BlockPool pool(40, true);
  Scheduler scheduler({.max_batch_tokens = 256}, pool);
  // A finished request leaves cached blocks that nobody holds.
  auto cached = WindowSequence(0, 17, 900);
  scheduler.AddWaiting(cached.get());
  Commit(scheduler, scheduler.Schedule());
  scheduler.Remove(cached.get());
  ASSERT_GE(pool.NumCachedUnowned(), 4);
  auto seq = WindowSequence(1, 100);
  auto other = WindowSequence(2, 8, 500);
  scheduler.AddWaiting(seq.get());
  scheduler.AddWaiting(other.get());
  const int32_t available = pool.NumAvailable();  // free and cached
  SchedulePlan plan = scheduler.Schedule();
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0].seq, seq.get());
  EXPECT_EQ(plan.chunks[1].num_tokens, 8);
  // seq: a window, then as far as the blocks left by other's 2 + 2 reach (2 per 4 tokens), the
  // cached ones among them.
  const int64_t longest = (available - 4) / 2 * kBlock;
  EXPECT_EQ(plan.chunks[0].num_tokens, longest);
  EXPECT_GT(longest, kWindow);
  EXPECT_EQ(pool.NumAvailable(), available - 4 - 2 * (longest / kBlock));
  EXPECT_EQ(plan.num_preempted, 0);
  Commit(scheduler, plan);
  plan = scheduler.Schedule();  // running: the rest of its prompt in the blocks left
  EXPECT_EQ(plan.num_preempted, 0);
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[1].seq, seq.get());
  EXPECT_EQ(plan.chunks[1].num_tokens, 100 - longest);
  EXPECT_EQ(pool.NumUsed(), Held(seq->table) + Held(*seq->window_table) + Held(other->table) +
                                Held(*other->window_table));
  scheduler.Remove(seq.get());
  scheduler.Remove(other.get());
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

// In a step that preempted, no chunk grows past its window: the blocks just freed are the
// preempted work's (as no admission runs then). X's decode needs 2 blocks of a full pool and
// preempts Z; Y's window chunk fits in the blocks it holds and stays a window, though Z's freed
// blocks would let it grow to 12 tokens.
TEST(WindowRetention, NoChunkGrowsPastItsWindowInAStepThatPreempted) {
  cache::BlockPool pool(14, false);
  Scheduler scheduler({.max_batch_tokens = 256}, pool);
  auto x = WindowSequence(0, 4);  // a decode at position 4: 1 + 1 blocks held, 1 + 1 to come
  x->tokens.push_back(7);
  auto y = WindowSequence(1, 40);  // a prefill at position 8, holding blocks up to position 15
  auto z = WindowSequence(2, 4, 500);  // a decode holding 2 + 2 blocks
  z->tokens.push_back(7);
  for (auto [seq, computed, held] :
       {std::tuple{x.get(), 4, 4}, std::tuple{y.get(), 8, 16}, std::tuple{z.get(), 4, 8}}) {
    ASSERT_TRUE(seq->table.Grow(pool, held));
    ASSERT_TRUE(seq->window_table->Grow(pool, held));
    seq->num_computed = computed;
    seq->status = engine::SequenceStatus::kRunning;
    scheduler.AddRunning(seq);
  }
  ASSERT_EQ(pool.NumAvailable(), 0);
  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.num_preempted, 1);
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0].seq, x.get());
  EXPECT_EQ(plan.chunks[1].seq, y.get());
  EXPECT_EQ(plan.chunks[1].num_tokens, kWindow);
  EXPECT_EQ(pool.NumAvailable(), 2);  // Z's blocks, less X's 2
  for (Sequence* seq : {x.get(), y.get(), z.get()}) scheduler.Remove(seq);
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

// Runs `seq` (already added) for `steps` steps.
void RunSteps(Scheduler& scheduler, int steps) {
  for (int i = 0; i < steps; ++i) Commit(scheduler, scheduler.Schedule());
}

std::unique_ptr<Sequence> SameStart(int64_t id, const Sequence& other, int32_t shared, int32_t extra) {
  auto seq = WindowSequence(id, shared + extra, 500);
  std::copy(other.tokens.begin(), other.tokens.begin() + shared, seq->tokens.begin());
  return seq;
}

TEST(WindowRetention, PrefixHitTakesTheCachedWindowBlocks) {
  cache::BlockPool pool(64, true);
  Scheduler scheduler({.max_batch_tokens = 64}, pool);
  auto first = WindowSequence(0, 16);
  scheduler.AddWaiting(first.get());
  RunSteps(scheduler, 10);
  scheduler.Remove(first.get());
  // Its window blocks of positions 0..7 were released during its decode, but stay cached.
  auto second = SameStart(1, *first, 16, 5);
  scheduler.AddWaiting(second.get());
  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.prefix_hit_tokens, 16);
  EXPECT_EQ(second->num_computed, 16);
  // The next token (position 16) reads positions 11..16: window blocks 2 and 3 from the cache,
  // none before.
  const auto& window = second->window_table->blocks();
  ASSERT_GE(window.size(), 4u);
  EXPECT_EQ(window[0], cache::kNoBlock);
  EXPECT_EQ(window[1], cache::kNoBlock);
  EXPECT_NE(window[2], cache::kNoBlock);
  EXPECT_NE(window[3], cache::kNoBlock);
  scheduler.Remove(second.get());
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(WindowRetention, PrefixHitShrinksWhenWindowBlocksWereEvicted) {
  // 12 blocks: decoding to 32 positions allocates 8 full and 8 window blocks, so the window
  // blocks released first (hashed, cached) are evicted for later ones.
  cache::BlockPool pool(12, true);
  Scheduler scheduler({.max_batch_tokens = 64}, pool);
  auto first = WindowSequence(0, 16);
  scheduler.AddWaiting(first.get());
  RunSteps(scheduler, 17);  // the prompt in one chunk, 16 decodes
  ASSERT_EQ(first->num_computed, 32);
  scheduler.Remove(first.get());
  // Its full blocks of positions 0..15 are cached, its window blocks of them are not: a hit
  // would need window blocks 2 and 3 (positions 11..15), and shorter ones blocks before those.
  auto second = SameStart(1, *first, 16, 8);
  scheduler.AddWaiting(second.get());
  const SchedulePlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.prefix_hit_tokens, 0);
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(second->num_computed, 0);
  EXPECT_EQ(plan.chunks[0].num_tokens, 24);  // its whole prompt: the blocks left hold it
  EXPECT_EQ(pool.NumUsed(), Held(second->table) + Held(*second->window_table));
  scheduler.Remove(second.get());
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(WindowRetention, PreemptionFreesBothTablesAndRecomputes) {
  // 14 blocks: two sequences of 8 prompt tokens (2 full + 2 window blocks each) run together
  // until their full rows need more blocks than the pool has; the newer one is preempted.
  cache::BlockPool pool(14, false);
  Scheduler scheduler({.max_batch_tokens = 64}, pool);
  auto a = WindowSequence(0, 8);
  auto b = WindowSequence(1, 8, 300);
  scheduler.AddWaiting(a.get());
  scheduler.AddWaiting(b.get());
  int preempted = 0;
  for (int step = 0; step < 30; ++step) {
    const SchedulePlan plan = scheduler.Schedule();
    preempted += plan.num_preempted;
    Commit(scheduler, plan);
    int32_t held = 0;
    for (const Sequence* s : {a.get(), b.get()}) {
      held += Held(s->table) + (s->window_table ? Held(*s->window_table) : 0);
      if (s->status == engine::SequenceStatus::kWaiting) {
        EXPECT_EQ(s->num_computed, 0);
        EXPECT_TRUE(s->table.blocks().empty());
        EXPECT_TRUE(s->window_table->blocks().empty());
      }
    }
    ASSERT_EQ(pool.NumUsed(), held);
    ASSERT_EQ(pool.CheckConsistency(), "");
  }
  EXPECT_GT(preempted, 0);
  scheduler.Remove(a.get());
  scheduler.Remove(b.get());
  EXPECT_EQ(pool.NumUsed(), 0);
}

TEST(WindowRetention, ForkOfAWindowSequenceRecomputes) {
  cache::BlockPool pool(32, true);
  Scheduler scheduler({.max_batch_tokens = 64}, pool);
  auto parent = WindowSequence(0, 10);
  scheduler.AddWaiting(parent.get());
  scheduler.CommitStep(scheduler.Schedule());
  auto child = WindowSequence(1, 10);
  std::optional<engine::BlockCopy> copy;
  EXPECT_FALSE(scheduler.Fork(child.get(), *parent, 10, copy));
  EXPECT_FALSE(copy.has_value());
  EXPECT_EQ(child->status, engine::SequenceStatus::kWaiting);
  EXPECT_TRUE(child->table.blocks().empty());
  scheduler.Remove(child.get());
  scheduler.Remove(parent.get());
  EXPECT_EQ(pool.NumUsed(), 0);
}

TEST(GroupedLayout, WindowRowsLiveInBlocksOfTheirOwn) {
  cache::CacheRowSpec full{.name = "mla.latent", .bytes_per_token = 40};
  cache::CacheRowSpec index{.name = "dsa.index_k", .bytes_per_token = 24};
  cache::CacheRowSpec window{.name = "mla.latent", .bytes_per_token = 56,
                             .retention = cache::Retention::kWindow, .window_tokens = 8};
  const cache::ModelCacheRows rows = {{full, index}, {window}, {full, index}};
  const cache::GroupedLayout g = cache::GroupedLayout::Build(rows, kBlock);
  ASSERT_TRUE(g.has_window);
  EXPECT_EQ(g.full.block_bytes, cache::CacheLayout::Build(g.full_rows, kBlock).block_bytes);
  EXPECT_GE(g.block_bytes, g.full.block_bytes);
  EXPECT_GE(g.block_bytes, g.window.block_bytes);
  EXPECT_GE(g.window_block_tokens, 1u);
  EXPECT_LE(g.window_block_tokens * 56, g.block_bytes);
  // Storage and view: a window row and a full row of the same position sit in different blocks.
  cache::CacheStorage storage(rows, g, 8);
  const cache::PagedRows view = storage.View(DType::kF32);
  EXPECT_EQ(view.Group(0, 0), 0);
  EXPECT_EQ(view.Group(1, 0), 1);
  EXPECT_EQ(view.GroupBlockTokens(1), g.window_block_tokens);
  const std::vector<cache::BlockId> full_table = {0, 1}, window_table = {2, 3};
  std::vector<float> a(10, 1.5f), b(14, -2.0f), out(14);
  view.WriteRow(full_table, 0, 0, 5, a.data());
  view.WriteRow(window_table, 1, 0, 5, b.data());
  view.GatherPositions(full_table, 0, 0, std::vector<int32_t>{5}, out.data());
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 10), a);
  view.GatherPositions(window_table, 1, 0, std::vector<int32_t>{5}, out.data());
  EXPECT_EQ(out, b);
  // A released window slot is never read.
  const std::vector<cache::BlockId> released = {cache::kNoBlock, 3};
  EXPECT_THROW(view.GatherPositions(released, 1, 0, std::vector<int32_t>{0}, out.data()),
               InternalError);
}

}  // namespace
}  // namespace latent
