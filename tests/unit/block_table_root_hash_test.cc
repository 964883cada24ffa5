// BlockTable::set_root_hash: sequences with different roots (model::Model::PrefixCacheSalt, e.g.
// LongRoPE prompts longer or shorter than the original length) never share cached blocks.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "cache/block_pool.h"
#include "cache/block_table.h"

namespace latent::cache {
namespace {

TEST(BlockTableRootHashTest, OnlyTablesWithTheSameRootShareBlocks) {
  BlockPool pool(16, true);
  std::vector<int32_t> tokens(9);
  std::iota(tokens.begin(), tokens.end(), 100);  // Two full blocks of 4, then one token.

  BlockTable salted(4);
  salted.set_root_hash(12345);
  ASSERT_TRUE(salted.Grow(pool, 9));
  salted.RegisterComputed(pool, tokens, 9);

  BlockTable plain(4);
  EXPECT_EQ(plain.MatchPrefix(pool, tokens), 0);  // Same tokens, other root: no hit.
  BlockTable other(4);
  other.set_root_hash(777);
  EXPECT_EQ(other.MatchPrefix(pool, tokens), 0);
  BlockTable same(4);
  same.set_root_hash(12345);
  EXPECT_EQ(same.MatchPrefix(pool, tokens), 8);
  EXPECT_EQ(same.blocks(), std::vector<BlockId>(salted.blocks().begin(), salted.blocks().begin() + 2));

  plain.Free(pool);
  other.Free(pool);
  same.Free(pool);
  salted.Free(pool);
  EXPECT_EQ(pool.CheckConsistency(), "");
}

}  // namespace
}  // namespace latent::cache
