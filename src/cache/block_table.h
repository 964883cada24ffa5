// BlockTable: the blocks of one sequence, in order; block i holds positions
// [i * block_tokens, (i + 1) * block_tokens) of every row of every layer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/block_pool.h"
#include "cache/regime_bounds.h"

namespace latent::cache {

class BlockTable {
 public:
  explicit BlockTable(uint32_t block_tokens) : block_tokens_(block_tokens) {}

  const std::vector<BlockId>& blocks() const { return blocks_; }
  uint32_t block_tokens() const { return block_tokens_; }
  int64_t capacity() const { return static_cast<int64_t>(blocks_.size()) * block_tokens_; }

  // Blocks that holding `tokens` positions needs beyond those held.
  int32_t BlocksNeeded(int64_t tokens) const;
  // Grows to hold `tokens` positions; all or nothing. False when the pool runs out.
  bool Grow(BlockPool& pool, int64_t tokens);
  // Releases every block.
  void Free(BlockPool& pool);
  // Sliding-window retention: releases the blocks holding only positions before `position`
  // (their slots become kNoBlock, so positions keep their blocks' indices). Returns how many
  // were released now.
  int32_t ReleaseBefore(BlockPool& pool, int64_t position);
  // Blocks the table holds (slots not released).
  int32_t NumHeld() const;
  // Keeps only the blocks of positions [0, tokens) (a multiple of block_tokens).
  void TruncateTo(BlockPool& pool, int64_t tokens);
  // The window rows of a prefix hit of `hit` tokens (a multiple of block_tokens) into an empty
  // table: the cached blocks of positions [hit - window + 1, hit), which the next token reads,
  // and released slots before them. All or nothing: false (table left empty) when one is not
  // cached. Hashed like MatchPrefix, from this table's own root.
  bool MatchWindow(BlockPool& pool, std::span<const int32_t> tokens, int64_t hit, int64_t window,
                   const RegimeBounds& regimes = {});
  // `regimes`, below: positions before a bound were computed one way and those from it on
  // another, in its kind of layer (cache/regime_bounds.h). Rows computed differently differ in
  // their last bits, so a block's identity includes how many of its positions lie before each
  // bound: a prefix hit then only ever serves rows computed exactly as the sequence itself would
  // compute them.
  //
  // Takes the longest chain of cached full blocks matching `tokens`, never covering the last
  // token (its logits must be computed). Returns the number of tokens covered.
  int64_t MatchPrefix(BlockPool& pool, std::span<const int32_t> tokens,
                      const RegimeBounds& regimes = {});
  // Registers the full blocks among the first `computed` tokens for prefix caching.
  void RegisterComputed(BlockPool& pool, std::span<const int32_t> tokens, int64_t computed,
                        const RegimeBounds& regimes = {});
  // Shares `other`'s full blocks (retained) and returns how many tokens they cover; the caller
  // copies the partial last block into a fresh one.
  int64_t ShareFullBlocks(BlockPool& pool, const BlockTable& other, int64_t tokens);
  // The parent hash of the first block (0 by default): sequences whose rows differ for the same
  // tokens (model::Model::PrefixCacheSalt) never share cached blocks.
  void set_root_hash(BlockHash root) { root_ = root; }

 private:
  uint32_t block_tokens_;
  std::vector<BlockId> blocks_;
  std::vector<BlockHash> hashes_;  // hashes of the leading full blocks registered so far
  BlockHash root_ = 0;

  // What identifies block `i`: its tokens, then (when any of its positions lie before
  // regimes.selected) a negative marker no token id can equal, and (when regimes.causal puts
  // another count of them before it) a second one from a range of its own.
  std::span<const int32_t> BlockKey(std::span<const int32_t> tokens, int64_t i,
                                    const RegimeBounds& regimes,
                                    std::vector<int32_t>& scratch) const;
};

}  // namespace latent::cache
