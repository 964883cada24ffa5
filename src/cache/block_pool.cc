#include "cache/block_pool.h"

#include <algorithm>
#include <string>

#include "base/error.h"

namespace latent::cache {

BlockHash HashBlock(BlockHash parent, std::span<const int32_t> tokens) {
  // FNV-1a over the parent hash and the token ids, then a final avalanche (splitmix64). The
  // parent goes in through mix() only: also XOR-ing it into the offset basis cancelled its low
  // byte, so parents differing only there (0 and 1, say) gave the same hash.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(parent);
  for (int32_t t : tokens) mix(static_cast<uint32_t>(t));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

namespace {
int32_t CheckedBlockCount(int32_t num_blocks) {
  if (num_blocks <= 0) Fail("the cache needs at least one block, got ", num_blocks);
  return num_blocks;
}
}  // namespace

BlockPool::BlockPool(int32_t num_blocks, bool prefix_caching)
    : prefix_caching_(prefix_caching),
      ref_count_(CheckedBlockCount(num_blocks), 0),
      lru_pos_(num_blocks),
      in_lru_(num_blocks, false),
      hash_of_(num_blocks),
      tokens_of_(num_blocks),
      parent_of_(num_blocks, 0) {
  // Hand out low ids first: pop from the back of a descending stack.
  for (BlockId b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockPool::NumAvailable() const {
  return static_cast<int32_t>(free_.size() + lru_.size());
}

std::optional<BlockId> BlockPool::Allocate() {
  BlockId block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    block = lru_.front();  // Evict the least recently released cached block.
    lru_.pop_front();
    in_lru_[block] = false;
    Unregister(block);
  } else {
    return std::nullopt;
  }
  ref_count_[block] = 1;
  ++num_used_;
  touched_end_ = std::max(touched_end_, block + 1);
  return block;
}

void BlockPool::Retain(BlockId block) {
  if (ref_count_[block] == 0) {
    LATENT_CHECK(in_lru_[block]);  // Only cached blocks can be revived.
    lru_.erase(lru_pos_[block]);
    in_lru_[block] = false;
    ++num_used_;
  }
  ++ref_count_[block];
}

void BlockPool::Release(BlockId block) {
  LATENT_CHECK(ref_count_[block] > 0);
  if (--ref_count_[block] > 0) return;
  --num_used_;
  if (hash_of_[block]) {
    lru_pos_[block] = lru_.insert(lru_.end(), block);
    in_lru_[block] = true;
  } else {
    free_.push_back(block);
  }
}

std::optional<BlockId> BlockPool::Lookup(BlockHash hash, std::span<const int32_t> tokens,
                                         BlockHash parent) const {
  if (!prefix_caching_) return std::nullopt;
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  // Compare the tokens and the parent too, so a hash collision can never serve another
  // prompt's rows.
  const auto& stored = tokens_of_[it->second];
  if (!std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end())) return std::nullopt;
  if (parent_of_[it->second] != parent) return std::nullopt;
  return it->second;
}

void BlockPool::Register(BlockId block, BlockHash hash, std::span<const int32_t> tokens,
                         BlockHash parent) {
  if (!prefix_caching_ || hash_of_[block] || by_hash_.count(hash)) return;
  hash_of_[block] = hash;
  parent_of_[block] = parent;
  tokens_of_[block].assign(tokens.begin(), tokens.end());
  by_hash_[hash] = block;
}

void BlockPool::Unregister(BlockId block) {
  if (!hash_of_[block]) return;
  by_hash_.erase(*hash_of_[block]);
  hash_of_[block].reset();
  tokens_of_[block].clear();
}

std::string BlockPool::CheckConsistency() const {
  int32_t used = 0;
  for (BlockId b = 0; b < touched_end_; ++b) {
    if (ref_count_[b] < 0) return StrCat("block ", b, " has negative reference count");
    if (ref_count_[b] > 0) ++used;
    if (in_lru_[b] && (ref_count_[b] != 0 || !hash_of_[b])) {
      return StrCat("block ", b, " is cached but held or unhashed");
    }
  }
  if (used != num_used_) return StrCat("used count ", num_used_, " but ", used, " blocks are held");
  if (static_cast<int32_t>(free_.size() + lru_.size()) + used != num_blocks()) {
    return StrCat("free ", free_.size(), " + cached ", lru_.size(), " + used ", used,
                  " != total ", num_blocks());
  }
  for (const auto& [hash, block] : by_hash_) {
    if (block >= touched_end_) return StrCat("block ", block, " is hashed but was never handed out");
    if (!hash_of_[block] || *hash_of_[block] != hash) return StrCat("hash index of block ", block, " is stale");
  }
  return "";
}

}  // namespace latent::cache
