// Per-sequence state in the cache: the slot layout of kPerSequence rows, the slot pool, and the
// scheduler handing slots to admitted sequences, taking them back on preemption and removal,
// and giving forked samples their own.
#include "cache/state_slots.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "base/error.h"
#include "cache/block_pool.h"
#include "cache/cache_layout.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"

namespace latent {
namespace {

cache::CacheRowSpec Latent(int64_t values) {
  cache::CacheRowSpec row;
  row.name = "mla.latent";
  row.values = values;
  row.bytes_per_token = 4 * values;
  return row;
}

cache::CacheRowSpec State(const char* name, int64_t values) {
  cache::CacheRowSpec row;
  row.name = name;
  row.retention = cache::Retention::kPerSequence;
  row.values = values;
  row.bytes_per_sequence = 4 * values;
  return row;
}

// Layer 0: a state layer (two rows), layer 1: an MLA layer, layer 2: a state layer.
cache::ModelCacheRows Hybrid() {
  return {{State("kda.conv", 10), State("kda.state", 33)}, {Latent(6)}, {State("kda.conv", 10), State("kda.state", 33)}};
}

TEST(StateSlotsTest, StateRowsTakeNoBlockBytesAndOneSlotPerSequence) {
  const cache::ModelCacheRows rows = Hybrid();
  EXPECT_EQ(cache::BytesPerToken(rows), 24u);
  // 40 bytes, then 132 at offset 64, 40 at 256, 132 at 320: 452, rounded to 512.
  EXPECT_EQ(cache::BytesPerSequence(rows), 512u);
  EXPECT_EQ(cache::CacheLayout::Build(rows, 16).block_bytes, 24u * 16);
  cache::StateStorage storage(rows, 3);
  const cache::StateSlots& v = storage.view();
  EXPECT_EQ(v.slot_bytes, 512u);
  EXPECT_EQ(storage.total_bytes(), 3u * 512);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(v.At(1, 2, 1)) - v.base, 512 + 320);
  EXPECT_THROW(v.At(0, 1, 0), InternalError);  // the MLA row is not state
  EXPECT_THROW(v.At(3, 0, 0), InternalError);  // no such slot
  // Zeroed at start; CopySlot copies every row of a slot.
  EXPECT_EQ(v.At(2, 0, 0)[0], 0.0f);
  for (int row = 0; row < 2; ++row) std::iota(v.At(0, 0, row), v.At(0, 0, row) + 10, 1.0f);
  v.At(0, 2, 1)[32] = 7.0f;
  v.CopySlot(0, 2);
  EXPECT_EQ(v.At(2, 0, 1)[9], 10.0f);
  EXPECT_EQ(v.At(2, 2, 1)[32], 7.0f);
  EXPECT_EQ(v.At(1, 2, 1)[32], 0.0f);
}

TEST(StateSlotsTest, NoStateRowsMeanAnEmptyView) {
  cache::StateStorage storage({{Latent(6)}}, 4);
  EXPECT_TRUE(storage.view().empty());
  EXPECT_EQ(cache::BytesPerSequence({{Latent(6)}}), 0u);
}

TEST(StateSlotsTest, SlotPoolHandsOutTheLowestFreeSlot) {
  cache::SlotPool pool(2);
  EXPECT_EQ(pool.Acquire(), 0);
  EXPECT_EQ(pool.Acquire(), 1);
  EXPECT_EQ(pool.Acquire(), std::nullopt);
  pool.Release(0);
  EXPECT_EQ(pool.NumUsed(), 1);
  EXPECT_EQ(pool.Acquire(), 0);
  EXPECT_THROW(pool.Release(5), InternalError);
}

class SchedulerStateTest : public ::testing::Test {
 protected:
  engine::Sequence* New(int64_t id, int32_t prompt) {
    auto seq = std::make_unique<engine::Sequence>(id, 4);
    seq->tokens.resize(prompt);
    std::iota(seq->tokens.begin(), seq->tokens.end(), 2);
    seq->num_prompt = prompt;
    sequences_.push_back(std::move(seq));
    return sequences_.back().get();
  }
  std::vector<std::unique_ptr<engine::Sequence>> sequences_;
};

TEST_F(SchedulerStateTest, AdmissionNeedsASlotAndPreemptionAndRemovalFreeIt) {
  cache::BlockPool blocks(16, false);
  cache::SlotPool slots(2);
  engine::Scheduler scheduler({.max_batch_tokens = 64, .max_seqs = 8}, blocks, &slots);
  engine::Sequence* a = New(0, 5);
  engine::Sequence* b = New(1, 5);
  engine::Sequence* c = New(2, 5);
  for (auto* s : {a, b, c}) scheduler.AddWaiting(s);
  engine::SchedulePlan plan = scheduler.Schedule();
  ASSERT_EQ(plan.chunks.size(), 2u);  // two slots: the third waits, first come first served
  EXPECT_EQ(a->state_slot, 0);
  EXPECT_EQ(b->state_slot, 1);
  EXPECT_EQ(c->state_slot, -1);
  EXPECT_EQ(c->table.blocks().size(), 0u);  // no blocks held while waiting for a slot
  scheduler.CommitStep(plan);
  scheduler.Remove(a);
  EXPECT_EQ(a->state_slot, -1);
  plan = scheduler.Schedule();
  EXPECT_EQ(c->state_slot, 0);
  scheduler.CommitStep(plan);
  // A fork takes a slot of its own; with none free it waits to compute the prompt itself.
  engine::Sequence* child = New(3, 5);
  std::optional<engine::BlockCopy> copy;
  EXPECT_FALSE(scheduler.Fork(child, *b, 5, copy));
  EXPECT_EQ(child->state_slot, -1);
  EXPECT_EQ(child->status, engine::SequenceStatus::kWaiting);
  scheduler.Remove(c);
  scheduler.Remove(child);
  engine::Sequence* child2 = New(4, 5);
  ASSERT_TRUE(scheduler.Fork(child2, *b, 5, copy));
  EXPECT_EQ(child2->state_slot, 0);
  for (auto& s : sequences_) scheduler.Remove(s.get());
  EXPECT_EQ(slots.NumUsed(), 0);
  EXPECT_EQ(blocks.NumUsed(), 0);
}

TEST_F(SchedulerStateTest, PreemptionGivesTheSlotBack) {
  cache::BlockPool blocks(3, false);  // 12 tokens of 4-token blocks
  cache::SlotPool slots(4);
  engine::Scheduler scheduler({.max_batch_tokens = 64, .max_seqs = 8}, blocks, &slots);
  engine::Sequence* a = New(0, 6);
  engine::Sequence* b = New(1, 4);
  scheduler.AddWaiting(a);
  scheduler.AddWaiting(b);
  engine::SchedulePlan plan = scheduler.Schedule();
  ASSERT_EQ(plan.chunks.size(), 2u);
  scheduler.CommitStep(plan);
  for (auto* s : {a, b}) s->tokens.push_back(1);
  // a's 7th token still fits its blocks; b's 5th needs a block none is free for: b, the newest,
  // is preempted and gives its slot back.
  for (int i = 0; i < 3; ++i) {
    plan = scheduler.Schedule();
    scheduler.CommitStep(plan);
    for (const auto& chunk : plan.chunks) chunk.seq->tokens.push_back(1);
    if (plan.num_preempted > 0) break;
  }
  EXPECT_EQ(b->status, engine::SequenceStatus::kWaiting);
  EXPECT_EQ(b->state_slot, -1);
  EXPECT_EQ(slots.NumUsed(), 1);
  for (auto& s : sequences_) scheduler.Remove(s.get());
  EXPECT_EQ(slots.NumUsed(), 0);
}

}  // namespace
}  // namespace latent
