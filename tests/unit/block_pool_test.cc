#include "cache/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "base/error.h"

namespace latent::cache {
namespace {

std::vector<int32_t> Tokens(std::initializer_list<int32_t> t) { return std::vector<int32_t>(t); }

TEST(BlockPoolTest, StartsEmptyAndHandsOutLowIdsFirst) {
  BlockPool pool(4, true);
  EXPECT_EQ(pool.num_blocks(), 4);
  EXPECT_EQ(pool.NumAvailable(), 4);
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.NumCachedUnowned(), 0);
  EXPECT_EQ(pool.Allocate(), 0);
  EXPECT_EQ(pool.Allocate(), 1);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockPoolTest, TouchedEndFollowsPeakUseNotPoolSize) {
  // CheckConsistency and the engine's --check-invariants scan only blocks below touched_end().
  BlockPool pool(1000000, true);
  EXPECT_EQ(pool.touched_end(), 0);
  const BlockId a = *pool.Allocate(), b = *pool.Allocate(), c = *pool.Allocate();
  EXPECT_EQ(pool.touched_end(), 3);
  pool.Release(b);
  pool.Release(a);
  EXPECT_EQ(*pool.Allocate(), a);  // Released blocks are reused before new ones.
  EXPECT_EQ(*pool.Allocate(), b);
  EXPECT_EQ(pool.touched_end(), 3);
  EXPECT_EQ(*pool.Allocate(), 3);
  EXPECT_EQ(pool.touched_end(), 4);
  pool.Register(c, HashBlock(0, Tokens({1, 2})), Tokens({1, 2}));
  pool.Release(c);  // Cached, below touched_end: still scanned.
  EXPECT_EQ(pool.CheckConsistency(), "");
  EXPECT_EQ(pool.NumAvailable(), 1000000 - 3);
}

TEST(BlockPoolTest, RejectsAnEmptyPool) { EXPECT_THROW(BlockPool(0, true), Error); }

TEST(BlockPoolTest, AllocateRetainReleaseCounts) {
  BlockPool pool(3, false);
  std::optional<BlockId> a = pool.Allocate();
  std::optional<BlockId> b = pool.Allocate();
  std::optional<BlockId> c = pool.Allocate();
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(std::set<BlockId>({*a, *b, *c}).size(), 3u);
  EXPECT_EQ(pool.ref_count(*a), 1);
  EXPECT_EQ(pool.NumUsed(), 3);
  EXPECT_EQ(pool.NumAvailable(), 0);
  EXPECT_FALSE(pool.Allocate().has_value());

  pool.Retain(*a);
  pool.Retain(*a);
  EXPECT_EQ(pool.ref_count(*a), 3);
  EXPECT_EQ(pool.NumUsed(), 3);  // Counted once however many holders.
  pool.Release(*a);
  pool.Release(*a);
  EXPECT_EQ(pool.ref_count(*a), 1);
  EXPECT_EQ(pool.NumAvailable(), 0);
  pool.Release(*a);
  EXPECT_EQ(pool.ref_count(*a), 0);
  EXPECT_EQ(pool.NumUsed(), 2);
  EXPECT_EQ(pool.NumAvailable(), 1);
  EXPECT_EQ(pool.NumCachedUnowned(), 0);  // Unhashed: plain free.
  EXPECT_EQ(pool.Allocate(), a);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockPoolTest, ReleasingAnUnheldBlockIsABug) {
  BlockPool pool(2, true);
  EXPECT_THROW(pool.Release(0), InternalError);
  // Retain only revives cached blocks, never free ones.
  EXPECT_THROW(pool.Retain(1), InternalError);
}

TEST(BlockPoolTest, HashedReleasedBlockStaysMatchableAndRetainRevivesIt) {
  BlockPool pool(4, true);
  const auto tokens = Tokens({1, 2, 3, 4});
  const BlockHash hash = HashBlock(0, tokens);
  const BlockId block = *pool.Allocate();
  EXPECT_FALSE(pool.Lookup(hash, tokens).has_value());
  pool.Register(block, hash, tokens);
  EXPECT_EQ(pool.Lookup(hash, tokens), block);  // Matchable while held, too.

  pool.Release(block);
  EXPECT_EQ(pool.ref_count(block), 0);
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.NumCachedUnowned(), 1);
  EXPECT_EQ(pool.NumAvailable(), 4);  // Cached blocks can still be handed out.
  EXPECT_EQ(pool.Lookup(hash, tokens), block);

  pool.Retain(block);
  EXPECT_EQ(pool.ref_count(block), 1);
  EXPECT_EQ(pool.NumUsed(), 1);
  EXPECT_EQ(pool.NumCachedUnowned(), 0);
  EXPECT_EQ(pool.NumAvailable(), 3);
  EXPECT_EQ(pool.Lookup(hash, tokens), block);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockPoolTest, AllocatePrefersNeverUsedBlocksOverCachedOnes) {
  BlockPool pool(3, true);
  const auto tokens = Tokens({7, 8});
  const BlockHash hash = HashBlock(0, tokens);
  const BlockId cached = *pool.Allocate();
  pool.Register(cached, hash, tokens);
  pool.Release(cached);
  const BlockId x = *pool.Allocate();
  const BlockId y = *pool.Allocate();
  EXPECT_NE(x, cached);
  EXPECT_NE(y, cached);
  EXPECT_EQ(pool.Lookup(hash, tokens), cached);  // Not evicted while free blocks remained.
  EXPECT_EQ(pool.Allocate(), cached);            // Now it is.
  EXPECT_FALSE(pool.Lookup(hash, tokens).has_value());
}

TEST(BlockPoolTest, EvictsLeastRecentlyReleasedFirst) {
  BlockPool pool(4, true);
  std::vector<BlockId> blocks;
  std::vector<std::vector<int32_t>> contents;
  std::vector<BlockHash> hashes;
  for (int32_t i = 0; i < 4; ++i) {
    blocks.push_back(*pool.Allocate());
    contents.push_back(Tokens({i, i + 100}));
    hashes.push_back(HashBlock(0, contents.back()));
    pool.Register(blocks[i], hashes[i], contents[i]);
  }
  // Release order: 2, 0, 3, 1. Then revive 0 and release it again: it becomes the newest.
  for (int i : {2, 0, 3, 1}) pool.Release(blocks[i]);
  pool.Retain(blocks[0]);
  pool.Release(blocks[0]);
  EXPECT_EQ(pool.NumCachedUnowned(), 4);

  const std::vector<int> expected_order = {2, 3, 1, 0};
  for (size_t n = 0; n < expected_order.size(); ++n) {
    const int victim = expected_order[n];
    EXPECT_EQ(pool.Allocate(), blocks[victim]) << "eviction " << n;
    EXPECT_FALSE(pool.Lookup(hashes[victim], contents[victim]).has_value());
    // The blocks not yet evicted are still found.
    for (size_t m = n + 1; m < expected_order.size(); ++m) {
      const int kept = expected_order[m];
      EXPECT_EQ(pool.Lookup(hashes[kept], contents[kept]), blocks[kept]);
    }
    EXPECT_EQ(pool.CheckConsistency(), "");
  }
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_EQ(pool.NumCachedUnowned(), 0);
}

TEST(BlockPoolTest, EvictedBlockCanBeRegisteredAgainWithNewContent) {
  BlockPool pool(1, true);
  const auto old_tokens = Tokens({1, 1});
  const auto new_tokens = Tokens({2, 2});
  const BlockId block = *pool.Allocate();
  pool.Register(block, HashBlock(0, old_tokens), old_tokens);
  pool.Release(block);
  EXPECT_EQ(pool.Allocate(), block);  // Evicts its own old content.
  pool.Register(block, HashBlock(0, new_tokens), new_tokens);
  EXPECT_FALSE(pool.Lookup(HashBlock(0, old_tokens), old_tokens).has_value());
  EXPECT_EQ(pool.Lookup(HashBlock(0, new_tokens), new_tokens), block);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockPoolTest, LookupRefusesAParentMismatch) {
  // Same tokens after another parent: even a full hash collision must not serve the block.
  BlockPool pool(2, true);
  const BlockId block = *pool.Allocate();
  const std::vector<int32_t> tokens{5, 6, 7};
  pool.Register(block, 42, tokens, /*parent=*/7);
  EXPECT_EQ(pool.Lookup(42, tokens, 7), block);
  EXPECT_FALSE(pool.Lookup(42, tokens, 8).has_value());
  EXPECT_FALSE(pool.Lookup(42, tokens).has_value());
}

TEST(BlockPoolTest, LookupRefusesATokenMismatchOnAHashCollision) {
  BlockPool pool(2, true);
  const BlockHash collision = 0x1234;
  const auto stored = Tokens({5, 6, 7});
  const BlockId block = *pool.Allocate();
  pool.Register(block, collision, stored);
  EXPECT_EQ(pool.Lookup(collision, stored), block);
  EXPECT_FALSE(pool.Lookup(collision, Tokens({5, 6, 8})).has_value());
  EXPECT_FALSE(pool.Lookup(collision, Tokens({5, 6})).has_value());
  EXPECT_FALSE(pool.Lookup(collision, Tokens({5, 6, 7, 8})).has_value());
  EXPECT_FALSE(pool.Lookup(collision, {}).has_value());
  pool.Release(block);
  EXPECT_FALSE(pool.Lookup(collision, Tokens({9, 9, 9})).has_value());
}

TEST(BlockPoolTest, RegisterKeepsTheFirstHolderOfAHashAndOfABlock) {
  BlockPool pool(3, true);
  const auto tokens = Tokens({1, 2});
  const BlockHash hash = HashBlock(0, tokens);
  const BlockId first = *pool.Allocate();
  const BlockId second = *pool.Allocate();
  pool.Register(first, hash, tokens);
  pool.Register(second, hash, tokens);  // Same content elsewhere: no-op.
  EXPECT_EQ(pool.Lookup(hash, tokens), first);
  pool.Release(second);
  EXPECT_EQ(pool.NumCachedUnowned(), 0);  // The duplicate is plain free.

  const auto other = Tokens({3, 4});
  pool.Register(first, HashBlock(0, other), other);  // Already hashed: no-op.
  EXPECT_FALSE(pool.Lookup(HashBlock(0, other), other).has_value());
  EXPECT_EQ(pool.Lookup(hash, tokens), first);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockPoolTest, PrefixCachingOffNeverHits) {
  BlockPool pool(2, false);
  EXPECT_FALSE(pool.prefix_caching());
  const auto tokens = Tokens({1, 2, 3});
  const BlockHash hash = HashBlock(0, tokens);
  const BlockId block = *pool.Allocate();
  pool.Register(block, hash, tokens);
  EXPECT_FALSE(pool.Lookup(hash, tokens).has_value());
  pool.Release(block);
  EXPECT_EQ(pool.NumCachedUnowned(), 0);  // Register was a no-op: the block is plain free.
  EXPECT_FALSE(pool.Lookup(hash, tokens).has_value());
  EXPECT_EQ(pool.NumAvailable(), 2);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

TEST(BlockPoolTest, HashBlockDependsOnParentAndTokens) {
  const auto a = Tokens({1, 2, 3, 4});
  EXPECT_EQ(HashBlock(0, a), HashBlock(0, a));
  EXPECT_NE(HashBlock(0, a), HashBlock(1, a));
  EXPECT_NE(HashBlock(HashBlock(0, a), a), HashBlock(0, a));
  EXPECT_NE(HashBlock(0, a), HashBlock(0, Tokens({1, 2, 3, 5})));
  EXPECT_NE(HashBlock(0, a), HashBlock(0, Tokens({2, 1, 3, 4})));  // Order matters.
  EXPECT_NE(HashBlock(0, a), HashBlock(0, Tokens({1, 2, 3})));
  EXPECT_NE(HashBlock(0, Tokens({0})), HashBlock(0, {}));
  EXPECT_NE(HashBlock(0, Tokens({-1})), HashBlock(0, Tokens({0})));
  // No collisions over a small exhaustive family.
  std::set<BlockHash> seen;
  for (int32_t x = 0; x < 20; ++x) {
    for (int32_t y = 0; y < 20; ++y) {
      for (BlockHash parent : {0ull, 1ull, 0xdeadbeefull}) {
        seen.insert(HashBlock(parent, Tokens({x, y})));
      }
    }
  }
  EXPECT_EQ(seen.size(), 20u * 20u * 3u);
}

// A reference model of the pool: reference counts, a free set, the cached blocks in release
// order, and the registered content of each block.
struct PoolModel {
  explicit PoolModel(int32_t n) : ref(n, 0), content(n) {
    for (BlockId b = 0; b < n; ++b) free.insert(b);
  }
  std::vector<int32_t> ref;
  std::set<BlockId> free;
  std::list<BlockId> lru;
  std::vector<std::optional<std::pair<BlockHash, std::vector<int32_t>>>> content;
  std::map<BlockHash, BlockId> by_hash;

  int32_t used() const {
    return static_cast<int32_t>(
        std::count_if(ref.begin(), ref.end(), [](int32_t r) { return r > 0; }));
  }
};

TEST(BlockPoolTest, RandomOperationsMatchAReferenceModel) {
  constexpr int32_t kBlocks = 12;
  BlockPool pool(kBlocks, true);
  PoolModel model(kBlocks);
  std::mt19937 rng(20240917);
  auto pick = [&](int32_t n) { return std::uniform_int_distribution<int32_t>(0, n - 1)(rng); };
  auto random_tokens = [&] { return Tokens({pick(3), pick(3)}); };  // 9 contents.
  auto held = [&] {
    std::vector<BlockId> out;
    for (BlockId b = 0; b < kBlocks; ++b)
      if (model.ref[b] > 0) out.push_back(b);
    return out;
  };
  int hits = 0, evictions = 0;

  for (int step = 0; step < 10000; ++step) {
    // Weights: allocate 3, release 3, retain 1, register 2, look up 2 (out of 11).
    const int r = pick(11);
    const int op = r < 3 ? 0 : r < 6 ? 2 : r < 7 ? 1 : r < 9 ? 3 : 4;
    if (op == 0) {  // Allocate.
      std::optional<BlockId> got = pool.Allocate();
      if (!model.free.empty()) {
        ASSERT_TRUE(got.has_value());
        ASSERT_TRUE(model.free.count(*got)) << "step " << step;
        model.free.erase(*got);
      } else if (!model.lru.empty()) {
        ASSERT_EQ(got, model.lru.front()) << "step " << step;  // Least recently released.
        model.lru.pop_front();
        model.by_hash.erase(model.content[*got]->first);
        model.content[*got].reset();
        ++evictions;
      } else {
        ASSERT_FALSE(got.has_value());
        continue;
      }
      model.ref[*got] = 1;
    } else if (op == 1) {  // Retain a held block.
      auto h = held();
      if (h.empty()) continue;
      const BlockId b = h[pick(static_cast<int32_t>(h.size()))];
      pool.Retain(b);
      ++model.ref[b];
    } else if (op == 2) {  // Release a held block.
      auto h = held();
      if (h.empty()) continue;
      const BlockId b = h[pick(static_cast<int32_t>(h.size()))];
      pool.Release(b);
      if (--model.ref[b] == 0) {
        if (model.content[b]) {
          model.lru.push_back(b);
        } else {
          model.free.insert(b);
        }
      }
    } else if (op == 3) {  // Register a held block.
      auto h = held();
      if (h.empty()) continue;
      const BlockId b = h[pick(static_cast<int32_t>(h.size()))];
      const auto tokens = random_tokens();
      const BlockHash hash = HashBlock(0, tokens);
      pool.Register(b, hash, tokens);
      if (!model.content[b] && !model.by_hash.count(hash)) {
        model.content[b] = {hash, tokens};
        model.by_hash[hash] = b;
      }
    } else {  // Look up random content; take the block on a hit, as MatchPrefix does.
      const auto tokens = random_tokens();
      const BlockHash hash = HashBlock(0, tokens);
      std::optional<BlockId> got = pool.Lookup(hash, tokens);
      auto it = model.by_hash.find(hash);
      if (it == model.by_hash.end()) {
        ASSERT_FALSE(got.has_value()) << "step " << step;
        continue;
      }
      ASSERT_EQ(got, it->second) << "step " << step;
      ++hits;
      pool.Retain(*got);
      if (model.ref[*got]++ == 0) model.lru.remove(*got);
    }

    ASSERT_EQ(pool.CheckConsistency(), "") << "step " << step;
    ASSERT_EQ(pool.NumUsed(), model.used()) << "step " << step;
    ASSERT_EQ(pool.NumCachedUnowned(), static_cast<int32_t>(model.lru.size())) << "step " << step;
    ASSERT_EQ(pool.NumAvailable(), kBlocks - model.used()) << "step " << step;
    for (BlockId b = 0; b < kBlocks; ++b)
      ASSERT_EQ(pool.ref_count(b), model.ref[b]) << "block " << b;
  }
  // The walk really exercised the interesting paths.
  EXPECT_GT(hits, 100);
  EXPECT_GT(evictions, 20);

  // Release everything: all blocks come back.
  for (BlockId b = 0; b < kBlocks; ++b)
    while (pool.ref_count(b) > 0) pool.Release(b);
  EXPECT_EQ(pool.NumUsed(), 0);
  EXPECT_EQ(pool.NumAvailable(), kBlocks);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

}  // namespace
}  // namespace latent::cache
