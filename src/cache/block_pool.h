// BlockPool: the cache's blocks as ids, with reference counts, a free list, and prefix caching.
// A full block that was computed can carry a hash of (parent hash, its token ids); a later
// prompt with the same tokens reuses it. A hashed block nobody holds stays matchable until it is
// evicted, least recently released first. Knows ids and counts, never bytes or tensors.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace latent::cache {

using BlockId = int32_t;
using BlockHash = uint64_t;
// A block-table slot whose block was released (sliding-window retention): its positions are
// never read again.
inline constexpr BlockId kNoBlock = -1;

// Hash of a full block: its parent's hash (0 for the first block) and its token ids.
BlockHash HashBlock(BlockHash parent, std::span<const int32_t> tokens);

class BlockPool {
 public:
  BlockPool(int32_t num_blocks, bool prefix_caching);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_count_.size()); }
  // Blocks that Allocate can hand out now: never used or cached without owner.
  int32_t NumAvailable() const;
  // Blocks held by at least one sequence.
  int32_t NumUsed() const { return num_used_; }
  // Cached blocks nobody holds (a subset of the available ones).
  int32_t NumCachedUnowned() const { return static_cast<int32_t>(lru_.size()); }
  int32_t ref_count(BlockId block) const { return ref_count_[block]; }
  // One past the highest block id ever handed out. Allocate hands out low ids first and reuses
  // released ones before new ones, so this follows the peak use, not the pool size; every block
  // at or past it still has its initial state (never held, cached or hashed).
  BlockId touched_end() const { return touched_end_; }
  bool prefix_caching() const { return prefix_caching_; }

  // A block with reference count 1, or nullopt when none is available. Prefers never-used
  // blocks; otherwise evicts the least recently released cached block.
  std::optional<BlockId> Allocate();
  // One more holder of `block` (a shared prefix block). Revives a cached unowned block.
  void Retain(BlockId block);
  // One holder fewer. At zero a hashed block becomes cached (evictable), others become free.
  void Release(BlockId block);

  // The block holding exactly `tokens` after the block hashed `parent` (0: first block), if one
  // is cached. Both the tokens and the parent hash are compared, so (matching block by block
  // from the first) a hash collision can never serve another prompt's rows.
  std::optional<BlockId> Lookup(BlockHash hash, std::span<const int32_t> tokens,
                                BlockHash parent = 0) const;
  // Marks a full, computed block as holding `tokens` after `parent` (hash `hash`). No-op when
  // prefix caching is off or another block already holds that content.
  void Register(BlockId block, BlockHash hash, std::span<const int32_t> tokens,
                BlockHash parent = 0);

  // Internal consistency (counts, lists, hashes). Returns an empty string or what is wrong. Scans
  // the blocks below touched_end() only (the others are untouched by construction), so a check
  // after every step costs O(peak use), not O(pool): a test cache of millions of 1-token blocks
  // stays cheap to verify.
  std::string CheckConsistency() const;

 private:
  void Unregister(BlockId block);

  bool prefix_caching_;
  std::vector<int32_t> ref_count_;           // [num_blocks]
  std::vector<BlockId> free_;                // never-used or unhashed free blocks (a stack)
  std::list<BlockId> lru_;                   // cached unowned blocks, oldest first
  std::vector<std::list<BlockId>::iterator> lru_pos_;  // [num_blocks], valid when in lru_
  std::vector<bool> in_lru_;                 // [num_blocks]
  std::vector<std::optional<BlockHash>> hash_of_;      // [num_blocks]
  std::vector<std::vector<int32_t>> tokens_of_;        // [num_blocks] tokens of hashed blocks
  std::vector<BlockHash> parent_of_;                   // [num_blocks] parent hash of hashed blocks
  std::unordered_map<BlockHash, BlockId> by_hash_;
  int32_t num_used_ = 0;
  BlockId touched_end_ = 0;
};

}  // namespace latent::cache
