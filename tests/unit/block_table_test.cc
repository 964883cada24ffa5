#include "cache/block_table.h"

#include <gtest/gtest.h>

#include <numeric>
#include <span>
#include <vector>

#include "cache/block_pool.h"

namespace latent::cache {
namespace {

// Tokens first, first + 1, ..., first + n - 1.
std::vector<int32_t> Range(int32_t first, int32_t n) {
  std::vector<int32_t> out(n);
  std::iota(out.begin(), out.end(), first);
  return out;
}

// A table that holds `tokens`, all computed and registered, as a finished prefill leaves it.
BlockTable Computed(BlockPool& pool, uint32_t block_tokens, const std::vector<int32_t>& tokens) {
  BlockTable table(block_tokens);
  EXPECT_TRUE(table.Grow(pool, static_cast<int64_t>(tokens.size())));
  table.RegisterComputed(pool, tokens, static_cast<int64_t>(tokens.size()));
  return table;
}

TEST(BlockTableTest, BlocksNeeded) {
  BlockPool pool(8, true);
  BlockTable table(4);
  EXPECT_EQ(table.block_tokens(), 4u);
  EXPECT_EQ(table.BlocksNeeded(0), 0);
  EXPECT_EQ(table.BlocksNeeded(1), 1);
  EXPECT_EQ(table.BlocksNeeded(4), 1);
  EXPECT_EQ(table.BlocksNeeded(5), 2);
  EXPECT_EQ(table.BlocksNeeded(16), 4);
  ASSERT_TRUE(table.Grow(pool, 5));
  EXPECT_EQ(table.blocks().size(), 2u);
  EXPECT_EQ(table.capacity(), 8);
  EXPECT_EQ(table.BlocksNeeded(3), 0);  // Never negative.
  EXPECT_EQ(table.BlocksNeeded(8), 0);
  EXPECT_EQ(table.BlocksNeeded(9), 1);
  ASSERT_TRUE(table.Grow(pool, 8));  // Already enough: takes nothing.
  EXPECT_EQ(table.blocks().size(), 2u);
  EXPECT_EQ(pool.NumUsed(), 2);
}

TEST(BlockTableTest, GrowIsAllOrNothing) {
  BlockPool pool(4, true);
  BlockTable other(4);
  ASSERT_TRUE(other.Grow(pool, 4));  // 3 blocks left.
  BlockTable table(4);
  EXPECT_FALSE(table.Grow(pool, 13));  // Needs 4.
  EXPECT_TRUE(table.blocks().empty());
  EXPECT_EQ(pool.NumUsed(), 1);
  EXPECT_EQ(pool.NumAvailable(), 3);
  ASSERT_TRUE(table.Grow(pool, 5));
  EXPECT_FALSE(table.Grow(pool, 13));  // Needs 2 more, 1 left.
  EXPECT_EQ(table.blocks().size(), 2u);
  EXPECT_EQ(pool.NumAvailable(), 1);
  ASSERT_TRUE(table.Grow(pool, 12));
  EXPECT_EQ(pool.NumAvailable(), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockTableTest, GrowEvictsCachedBlocksWhenNeeded) {
  BlockPool pool(2, true);
  BlockTable first = Computed(pool, 2, Range(0, 4));
  first.Free(pool);
  EXPECT_EQ(pool.NumCachedUnowned(), 2);
  BlockTable table(2);
  ASSERT_TRUE(table.Grow(pool, 4));
  EXPECT_EQ(pool.NumCachedUnowned(), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockTableTest, MatchPrefixNeverCoversTheLastToken) {
  BlockPool pool(16, true);
  const auto prompt = Range(100, 12);  // Exactly 3 blocks of 4.
  BlockTable first = Computed(pool, 4, prompt);

  BlockTable exact(4);
  EXPECT_EQ(exact.MatchPrefix(pool, prompt), 8);  // 2 blocks, not 3.
  ASSERT_EQ(exact.blocks().size(), 2u);
  EXPECT_EQ(exact.blocks()[0], first.blocks()[0]);
  EXPECT_EQ(exact.blocks()[1], first.blocks()[1]);

  auto longer = prompt;
  longer.push_back(7);
  BlockTable more(4);
  EXPECT_EQ(more.MatchPrefix(pool, longer), 12);  // One more token: all 3 blocks.

  BlockTable one_block(4);
  EXPECT_EQ(one_block.MatchPrefix(pool, Range(100, 4)), 0);
  BlockTable nothing(4);
  EXPECT_EQ(nothing.MatchPrefix(pool, {}), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockTableTest, MatchPrefixRetainsMatchedBlocks) {
  BlockPool pool(16, true);
  const auto prompt = Range(0, 9);
  BlockTable first = Computed(pool, 4, prompt);
  const std::vector<BlockId> blocks = first.blocks();

  BlockTable second(4);
  ASSERT_EQ(second.MatchPrefix(pool, prompt), 8);
  EXPECT_EQ(pool.ref_count(blocks[0]), 2);
  EXPECT_EQ(pool.ref_count(blocks[1]), 2);
  EXPECT_EQ(pool.ref_count(blocks[2]), 1);  // The partial block is never shared.

  // Matching cached unowned blocks revives them.
  first.Free(pool);
  second.Free(pool);
  EXPECT_EQ(pool.NumCachedUnowned(), 2);
  EXPECT_EQ(pool.NumUsed(), 0);
  BlockTable third(4);
  ASSERT_EQ(third.MatchPrefix(pool, prompt), 8);
  EXPECT_EQ(pool.NumCachedUnowned(), 0);
  EXPECT_EQ(pool.NumUsed(), 2);
  EXPECT_EQ(pool.ref_count(blocks[0]), 1);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockTableTest, MatchPrefixStopsAtTheFirstMiss) {
  BlockPool pool(16, true);
  const auto prompt = Range(0, 13);
  BlockTable first = Computed(pool, 4, prompt);

  auto changed = prompt;
  changed[5] = 999;  // Block 1 differs; blocks 0 and 2 hold the same tokens.
  BlockTable second(4);
  EXPECT_EQ(second.MatchPrefix(pool, changed), 4);
  EXPECT_EQ(second.blocks().size(), 1u);
  EXPECT_EQ(pool.ref_count(first.blocks()[1]), 1);
  EXPECT_EQ(pool.ref_count(first.blocks()[2]), 1);
}

TEST(BlockTableTest, MatchPrefixStopsAtAnEvictedMiddleBlock) {
  BlockPool pool(3, true);
  const auto prompt = Range(0, 12);
  BlockTable first = Computed(pool, 4, prompt);
  const std::vector<BlockId> blocks = first.blocks();
  const BlockHash h0 = HashBlock(0, std::span(prompt).subspan(0, 4));
  const BlockHash h1 = HashBlock(h0, std::span(prompt).subspan(4, 4));
  const BlockHash h2 = HashBlock(h1, std::span(prompt).subspan(8, 4));
  first.Free(pool);

  // Evict block 1 only: hold block 2, then allocate the least recently released left.
  pool.Retain(blocks[2]);
  const BlockId taken = *pool.Allocate();
  ASSERT_EQ(taken, blocks[1]);
  pool.Release(blocks[2]);
  pool.Release(taken);
  EXPECT_EQ(pool.Lookup(h2, std::span(prompt).subspan(8, 4), h1), blocks[2]);  // Still cached.

  auto longer = prompt;
  longer.push_back(0);
  BlockTable second(4);
  EXPECT_EQ(second.MatchPrefix(pool, longer), 4);
  ASSERT_EQ(second.blocks().size(), 1u);
  EXPECT_EQ(second.blocks()[0], blocks[0]);
  EXPECT_EQ(pool.ref_count(blocks[2]), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockTableTest, PrefixCachingOffNeverMatches) {
  BlockPool pool(8, false);
  const auto prompt = Range(0, 9);
  BlockTable first = Computed(pool, 4, prompt);
  BlockTable second(4);
  EXPECT_EQ(second.MatchPrefix(pool, prompt), 0);
  EXPECT_TRUE(second.blocks().empty());
  first.Free(pool);
  EXPECT_EQ(pool.NumCachedUnowned(), 0);
  EXPECT_EQ(pool.NumAvailable(), 8);
}

// Blocks computed with a different regime boundary (the MLA form switch) hold rows that differ in
// their last bits: they match only a sequence that puts its boundary at the same place within them.
TEST(BlockTableTest, MatchPrefixHonoursTheRegimeBoundary) {
  BlockPool pool(32, true);
  const auto tokens = Range(10, 13);  // Blocks [10..13], [14..17], [18..21], then token 22.
  BlockTable expanded(4);             // Positions 0..9 computed one way (boundary 10), 10.. another.
  ASSERT_TRUE(expanded.Grow(pool, 13));
  expanded.RegisterComputed(pool, tokens, 13, RegimeBounds::Both(10));

  BlockTable plain(4);  // Boundary 0: no block of `expanded` was computed like this.
  EXPECT_EQ(plain.MatchPrefix(pool, tokens), 0);
  BlockTable same(4);
  EXPECT_EQ(same.MatchPrefix(pool, tokens, RegimeBounds::Both(10)), 12);
  EXPECT_EQ(same.blocks(), std::vector<BlockId>(expanded.blocks().begin(), expanded.blocks().begin() + 3));
  BlockTable earlier(4);  // Boundary 9: block 0 and 1 agree (all before it), block 2 does not.
  EXPECT_EQ(earlier.MatchPrefix(pool, tokens, RegimeBounds::Both(9)), 8);
  BlockTable later(4);  // Boundary 12: block 2 lies wholly before it, unlike in `expanded`.
  EXPECT_EQ(later.MatchPrefix(pool, tokens, RegimeBounds::Both(12)), 8);
  // Blocks wholly after the boundary in both keep the plain key: a boundary-0 table registers
  // its own block 0 alongside, and each sequence finds its own.
  const BlockId first_expanded = expanded.blocks()[0];
  BlockTable plain_owner(4);
  ASSERT_TRUE(plain_owner.Grow(pool, 13));
  plain_owner.RegisterComputed(pool, tokens, 13);
  BlockTable plain_again(4);
  EXPECT_EQ(plain_again.MatchPrefix(pool, tokens), 12);
  EXPECT_NE(plain_again.blocks()[0], first_expanded);
  for (BlockTable* t : {&expanded, &plain, &same, &earlier, &later, &plain_owner, &plain_again}) {
    t->Free(pool);
  }
  EXPECT_EQ(pool.CheckConsistency(), "");
}

// Two bounds (a DSA model whose selecting layers switch form before its causal ones): a block
// matches only where both put the same number of its positions before them.
TEST(BlockTableTest, MatchPrefixHonoursBothRegimeBounds) {
  BlockPool pool(32, true);
  const auto tokens = Range(10, 13);  // Blocks of positions 0..3, 4..7, 8..11, then 12.
  BlockTable owner(4);                // Selecting layers switch at 4, causal ones at 10.
  ASSERT_TRUE(owner.Grow(pool, 13));
  owner.RegisterComputed(pool, tokens, 13, RegimeBounds{4, 10});
  const std::vector<BlockId> blocks = owner.blocks();
  struct Case {
    RegimeBounds bounds;
    int64_t hit;
  };
  for (const Case& c : {Case{{4, 10}, 12},
                        Case{RegimeBounds::Both(4), 4},   // block 1: causal 4 against 0
                        Case{RegimeBounds::Both(10), 4},  // block 1: selecting 0 against 4
                        Case{{4, 9}, 8},                  // block 2: causal 2 against 1
                        Case{{4, 12}, 8},                 // block 2: causal 2 against 4
                        Case{{0, 10}, 0},                 // block 0: selecting 4 against 0
                        Case{{3, 10}, 0}}) {              // block 0: selecting 4 against 3
    BlockTable table(4);
    EXPECT_EQ(table.MatchPrefix(pool, tokens, c.bounds), c.hit)
        << "selected " << c.bounds.selected << " causal " << c.bounds.causal;
    EXPECT_EQ(table.blocks(), std::vector<BlockId>(blocks.begin(), blocks.begin() + c.hit / 4));
    table.Free(pool);
  }
  // (selected s, causal c) never keys like (c', s') of another pair: the block of 0..3 registered
  // with {0, 4} is another block than with {4, 4}.
  BlockTable causal_only(4);
  ASSERT_TRUE(causal_only.Grow(pool, 13));
  causal_only.RegisterComputed(pool, tokens, 13, RegimeBounds{0, 4});
  BlockTable again(4);
  EXPECT_EQ(again.MatchPrefix(pool, tokens, RegimeBounds{0, 4}), 12);
  EXPECT_NE(again.blocks()[0], blocks[0]);
  for (BlockTable* t : {&owner, &causal_only, &again}) t->Free(pool);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockTableTest, RegisterComputedRegistersOnlyFullComputedBlocksWithChainedHashes) {
  BlockPool pool(16, true);
  const auto tokens = Range(50, 11);  // Blocks [50..53], [54..57], [58..60] (partial).
  const auto span = std::span(tokens);
  const BlockHash h0 = HashBlock(0, span.subspan(0, 4));
  const BlockHash h1 = HashBlock(h0, span.subspan(4, 4));
  BlockTable table(4);
  ASSERT_TRUE(table.Grow(pool, 11));

  table.RegisterComputed(pool, tokens, 3);  // No full block computed yet.
  EXPECT_FALSE(pool.Lookup(h0, span.subspan(0, 4)).has_value());
  table.RegisterComputed(pool, tokens, 7);
  EXPECT_EQ(pool.Lookup(h0, span.subspan(0, 4)), table.blocks()[0]);
  EXPECT_FALSE(pool.Lookup(h1, span.subspan(4, 4), h0).has_value());
  table.RegisterComputed(pool, tokens, 11);
  EXPECT_EQ(pool.Lookup(h1, span.subspan(4, 4), h0), table.blocks()[1]);
  // Unchained hash of block 1 (parent 0) is not what was registered.
  EXPECT_FALSE(pool.Lookup(HashBlock(0, span.subspan(4, 4)), span.subspan(4, 4)).has_value());
  EXPECT_EQ(pool.CheckConsistency(), "");

  // A second table with the same tokens gets the same blocks.
  BlockTable second(4);
  ASSERT_EQ(second.MatchPrefix(pool, tokens), 8);
  EXPECT_EQ(second.blocks()[0], table.blocks()[0]);
  EXPECT_EQ(second.blocks()[1], table.blocks()[1]);

  // After decoding one more token into the partial block and filling it, it is registered too
  // and chained after the matched ones.
  auto grown = tokens;
  grown.push_back(61);
  ASSERT_TRUE(second.Grow(pool, 12));
  second.RegisterComputed(pool, grown, 12);
  const BlockHash h2 = HashBlock(h1, std::span(grown).subspan(8, 4));
  EXPECT_EQ(pool.Lookup(h2, std::span(grown).subspan(8, 4), h1), second.blocks()[2]);
}

TEST(BlockTableTest, RegisterComputedWithPrefixCachingOffIsANoOp) {
  BlockPool pool(4, false);
  const auto tokens = Range(0, 8);
  BlockTable table(4);
  ASSERT_TRUE(table.Grow(pool, 8));
  table.RegisterComputed(pool, tokens, 8);
  table.Free(pool);
  EXPECT_EQ(pool.NumCachedUnowned(), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockTableTest, ShareFullBlocksRetainsAndKeepsTheHashChain) {
  BlockPool pool(16, true);
  const auto prompt = Range(0, 10);
  BlockTable first = Computed(pool, 4, prompt);

  BlockTable fork(4);
  EXPECT_EQ(fork.ShareFullBlocks(pool, first, 10), 8);
  ASSERT_EQ(fork.blocks().size(), 2u);
  EXPECT_EQ(fork.blocks()[0], first.blocks()[0]);
  EXPECT_EQ(fork.blocks()[1], first.blocks()[1]);
  EXPECT_EQ(pool.ref_count(first.blocks()[0]), 2);
  EXPECT_EQ(pool.ref_count(first.blocks()[1]), 2);
  EXPECT_EQ(pool.ref_count(first.blocks()[2]), 1);

  // The fork's own third block, once full, is registered after the shared chain.
  auto tokens = prompt;
  tokens.push_back(77);
  tokens.push_back(78);
  ASSERT_TRUE(fork.Grow(pool, 12));
  EXPECT_NE(fork.blocks()[2], first.blocks()[2]);
  fork.RegisterComputed(pool, tokens, 12);
  const auto span = std::span(tokens);
  const BlockHash h0 = HashBlock(0, span.subspan(0, 4));
  const BlockHash h1 = HashBlock(h0, span.subspan(4, 4));
  EXPECT_EQ(pool.Lookup(HashBlock(h1, span.subspan(8, 4)), span.subspan(8, 4), h1), fork.blocks()[2]);

  BlockTable exact(4);
  EXPECT_EQ(exact.ShareFullBlocks(pool, first, 8), 8);
  EXPECT_EQ(pool.ref_count(first.blocks()[0]), 3);

  first.Free(pool);
  fork.Free(pool);
  exact.Free(pool);
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockTableTest, FreeReleasesTheTailFirst) {
  BlockPool pool(3, true);
  BlockTable first = Computed(pool, 4, Range(0, 12));
  const std::vector<BlockId> blocks = first.blocks();
  first.Free(pool);
  EXPECT_TRUE(first.blocks().empty());
  EXPECT_EQ(first.capacity(), 0);
  EXPECT_EQ(pool.NumCachedUnowned(), 3);
  // The last block of the prompt is evicted first, its first block last.
  EXPECT_EQ(pool.Allocate(), blocks[2]);
  EXPECT_EQ(pool.Allocate(), blocks[1]);
  EXPECT_EQ(pool.Allocate(), blocks[0]);
}

TEST(BlockTableTest, FreedTableCanMatchAgain) {
  BlockPool pool(8, true);
  const auto prompt = Range(0, 9);
  BlockTable table = Computed(pool, 4, prompt);
  const std::vector<BlockId> blocks = table.blocks();
  table.Free(pool);
  ASSERT_EQ(table.MatchPrefix(pool, prompt), 8);  // Free also forgot the old hashes.
  EXPECT_EQ(table.blocks()[0], blocks[0]);
  EXPECT_EQ(table.blocks()[1], blocks[1]);
  table.Free(pool);
  EXPECT_EQ(pool.NumUsed(), 0);
}

}  // namespace
}  // namespace latent::cache
