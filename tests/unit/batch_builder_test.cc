#include "engine/batch_builder.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "cache/block_pool.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"

namespace latent::engine {
namespace {

Sequence MakeSequence(int64_t id, int32_t first_token, int32_t num_tokens, int64_t num_prompt,
                      int64_t num_computed) {
  Sequence seq(id, 4);
  seq.tokens.resize(num_tokens);
  std::iota(seq.tokens.begin(), seq.tokens.end(), first_token);
  seq.num_prompt = num_prompt;
  seq.num_computed = num_computed;
  return seq;
}

TEST(BatchBuilderTest, DecodeMidPrefillAndFinalPrefillChunks) {
  // A decode: 4 prompt tokens + 1 generated, 4 computed; runs token 14 at position 4.
  Sequence decode = MakeSequence(0, 10, 5, 4, 4);
  // A prefill in the middle: 10 tokens, 3 computed; runs positions 3..6 and stops short.
  Sequence middle = MakeSequence(1, 20, 10, 10, 3);
  // The last chunk of a prefill: 6 tokens, 2 computed; runs positions 2..5.
  Sequence last = MakeSequence(2, 30, 6, 6, 2);
  SchedulePlan plan;
  plan.chunks = {{&decode, 1}, {&middle, 4}, {&last, 4}};
  plan.num_tokens = 9;

  BuiltBatch batch;
  BuildBatch(plan, batch);
  const model::ForwardBatch& f = batch.forward;
  EXPECT_EQ(f.token_ids, (std::vector<int32_t>{14, 23, 24, 25, 26, 32, 33, 34, 35}));
  EXPECT_EQ(f.positions, (std::vector<int64_t>{4, 3, 4, 5, 6, 2, 3, 4, 5}));
  EXPECT_EQ(f.seq_slots, (std::vector<int32_t>{0, 1, 1, 1, 1, 2, 2, 2, 2}));
  // Logits for the decode's token and the final prefill's last token, in slot order.
  EXPECT_EQ(f.logits_rows, (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(batch.logits_index, (std::vector<int32_t>{0, -1, 1}));
  ASSERT_EQ(batch.tables.size(), 3u);
  EXPECT_EQ(batch.tables[0], &decode.table);
  EXPECT_EQ(batch.tables[1], &middle.table);
  EXPECT_EQ(batch.tables[2], &last.table);
}

TEST(BatchBuilderTest, GroupsSequencesAndCarriesTheirBlockTables) {
  Sequence decode = MakeSequence(0, 10, 5, 4, 4);
  Sequence middle = MakeSequence(1, 20, 10, 10, 3);
  cache::BlockPool pool(8, false);
  ASSERT_TRUE(decode.table.Grow(pool, 5));   // 2 blocks of 4 tokens
  ASSERT_TRUE(middle.table.Grow(pool, 7));   // 2 blocks
  SchedulePlan plan;
  plan.chunks = {{&decode, 1}, {&middle, 4}};
  BuiltBatch batch;
  BuildBatch(plan, batch);
  const model::ForwardBatch& f = batch.forward;
  EXPECT_EQ(f.num_sequences(), 2);
  EXPECT_EQ(f.seq_starts, (std::vector<int32_t>{0, 1, 5}));
  EXPECT_EQ(f.context_lens, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(f.block_table_starts, (std::vector<int32_t>{0, 2, 4}));
  const auto table0 = f.BlockTable(0), table1 = f.BlockTable(1);
  EXPECT_EQ(std::vector<cache::BlockId>(table0.begin(), table0.end()), decode.table.blocks());
  EXPECT_EQ(std::vector<cache::BlockId>(table1.begin(), table1.end()), middle.table.blocks());
  decode.table.Free(pool);
  middle.table.Free(pool);
}

TEST(BatchBuilderTest, LogitsRowsFollowSlotOrder) {
  // Prefill first, then two decodes: each logits row points at its chunk's last token.
  Sequence prefill = MakeSequence(5, 100, 3, 3, 0);
  Sequence a = MakeSequence(1, 200, 8, 7, 7);
  Sequence b = MakeSequence(2, 300, 2, 1, 1);
  SchedulePlan plan;
  plan.chunks = {{&prefill, 3}, {&a, 1}, {&b, 1}};
  BuiltBatch batch;
  BuildBatch(plan, batch);
  EXPECT_EQ(batch.forward.token_ids, (std::vector<int32_t>{100, 101, 102, 207, 301}));
  EXPECT_EQ(batch.forward.positions, (std::vector<int64_t>{0, 1, 2, 7, 1}));
  EXPECT_EQ(batch.forward.logits_rows, (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(batch.logits_index, (std::vector<int32_t>{0, 1, 2}));
}

TEST(BatchBuilderTest, PromptLogitsRowsOnlyForSequencesThatAskForThem) {
  // Does not ask: a mid-prefill chunk has no logits at all.
  Sequence plain = MakeSequence(0, 10, 10, 10, 0);
  // Asks, first chunk of 6 prompt tokens: positions 0..3 give tokens 1..4's logprobs.
  Sequence first = MakeSequence(1, 20, 6, 6, 0);
  first.prompt_logprobs_next = 1;
  // Asks, recomputing after a preemption with tokens 1, 2 already reported: positions 0, 1 need
  // no rows, 2, 3 give tokens 3, 4; position 4 is the last one (sampling), not a prompt row.
  Sequence resumed = MakeSequence(2, 30, 5, 5, 0);
  resumed.prompt_logprobs_next = 3;
  // Asked, all reported: decodes like any other.
  Sequence done = MakeSequence(3, 40, 4, 3, 3);
  done.prompt_logprobs_next = 3;
  SchedulePlan plan;
  plan.chunks = {{&plain, 4}, {&first, 4}, {&resumed, 5}, {&done, 1}};
  BuiltBatch batch;
  BuildBatch(plan, batch);
  EXPECT_EQ(batch.forward.logits_rows, (std::vector<int32_t>{4, 5, 6, 7, 10, 11, 12, 13}));
  EXPECT_EQ(batch.logits_index, (std::vector<int32_t>{-1, -1, 6, 7}));
  ASSERT_EQ(batch.prompt_logits.size(), 4u);
  EXPECT_EQ(batch.prompt_logits[0].count, 0);
  EXPECT_EQ(batch.prompt_logits[1].first_row, 0);
  EXPECT_EQ(batch.prompt_logits[1].count, 4);
  EXPECT_EQ(batch.prompt_logits[1].first_position, 0);
  EXPECT_EQ(batch.prompt_logits[2].first_row, 4);
  EXPECT_EQ(batch.prompt_logits[2].count, 2);
  EXPECT_EQ(batch.prompt_logits[2].first_position, 2);
  EXPECT_EQ(batch.prompt_logits[3].count, 0);

  // The next chunk of `first`: positions 4, 5; only 4 is a prompt row (token 5), 5 samples.
  first.num_computed = 4;
  first.prompt_logprobs_next = 5;
  plan.chunks = {{&first, 2}};
  BuildBatch(plan, batch);
  EXPECT_EQ(batch.forward.logits_rows, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(batch.prompt_logits[0].count, 1);
  EXPECT_EQ(batch.prompt_logits[0].first_position, 4);
  EXPECT_EQ(batch.logits_index, (std::vector<int32_t>{1}));
}

TEST(BatchBuilderTest, ReusedOutputIsCleared) {
  Sequence long_prompt = MakeSequence(0, 0, 20, 20, 0);
  Sequence other = MakeSequence(1, 50, 3, 3, 0);
  BuiltBatch batch;
  SchedulePlan big;
  big.chunks = {{&long_prompt, 8}, {&other, 3}};
  BuildBatch(big, batch);
  EXPECT_EQ(batch.forward.token_ids.size(), 11u);
  EXPECT_EQ(batch.logits_index, (std::vector<int32_t>{-1, 0}));
  EXPECT_EQ(batch.forward.logits_rows, (std::vector<int32_t>{10}));

  long_prompt.num_computed = 8;
  SchedulePlan small;
  small.chunks = {{&long_prompt, 12}};
  BuildBatch(small, batch);
  std::vector<int32_t> expected_tokens(12);
  std::iota(expected_tokens.begin(), expected_tokens.end(), 8);
  EXPECT_EQ(batch.forward.token_ids, expected_tokens);
  EXPECT_EQ(batch.forward.positions.front(), 8);
  EXPECT_EQ(batch.forward.positions.back(), 19);
  EXPECT_EQ(batch.forward.seq_slots, std::vector<int32_t>(12, 0));
  EXPECT_EQ(batch.forward.logits_rows, (std::vector<int32_t>{11}));
  EXPECT_EQ(batch.logits_index, (std::vector<int32_t>{0}));
  EXPECT_EQ(batch.tables.size(), 1u);

  BuildBatch(SchedulePlan{}, batch);
  EXPECT_TRUE(batch.forward.token_ids.empty());
  EXPECT_TRUE(batch.forward.positions.empty());
  EXPECT_TRUE(batch.forward.seq_slots.empty());
  EXPECT_TRUE(batch.forward.logits_rows.empty());
  EXPECT_TRUE(batch.tables.empty());
  EXPECT_TRUE(batch.logits_index.empty());
}

}  // namespace
}  // namespace latent::engine
