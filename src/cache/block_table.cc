#include "cache/block_table.h"

#include <algorithm>

#include "base/error.h"

namespace latent::cache {

int32_t BlockTable::BlocksNeeded(int64_t tokens) const {
  const int64_t needed = (tokens + block_tokens_ - 1) / block_tokens_;
  return needed > static_cast<int64_t>(blocks_.size())
             ? static_cast<int32_t>(needed - static_cast<int64_t>(blocks_.size()))
             : 0;
}

bool BlockTable::Grow(BlockPool& pool, int64_t tokens) {
  const int32_t needed = BlocksNeeded(tokens);
  if (needed > pool.NumAvailable()) return false;
  for (int32_t i = 0; i < needed; ++i) {
    std::optional<BlockId> block = pool.Allocate();
    LATENT_CHECK(block.has_value());
    blocks_.push_back(*block);
  }
  return true;
}

void BlockTable::Free(BlockPool& pool) {
  // Release the tail first, so that a prompt's later blocks are evicted before its earlier
  // ones (which more prompts share).
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    if (*it != kNoBlock) pool.Release(*it);
  }
  blocks_.clear();
  hashes_.clear();
}

int32_t BlockTable::ReleaseBefore(BlockPool& pool, int64_t position) {
  const int64_t whole = std::min<int64_t>(std::max<int64_t>(position, 0) / block_tokens_, blocks_.size());
  int32_t released = 0;
  for (int64_t i = whole - 1; i >= 0 && blocks_[i] != kNoBlock; --i) {  // earlier ones went before
    pool.Release(blocks_[i]);
    blocks_[i] = kNoBlock;
    ++released;
  }
  return released;
}

void BlockTable::TruncateTo(BlockPool& pool, int64_t tokens) {
  LATENT_CHECK(tokens % block_tokens_ == 0);
  const size_t keep = static_cast<size_t>(tokens / block_tokens_);
  while (blocks_.size() > keep) {
    if (blocks_.back() != kNoBlock) pool.Release(blocks_.back());
    blocks_.pop_back();
  }
  if (hashes_.size() > keep) hashes_.resize(keep);
}

bool BlockTable::MatchWindow(BlockPool& pool, std::span<const int32_t> tokens, int64_t hit,
                             int64_t window, const RegimeBounds& regimes) {
  LATENT_CHECK(blocks_.empty() && hit % block_tokens_ == 0 &&
               hit <= static_cast<int64_t>(tokens.size()));
  const int64_t count = hit / block_tokens_;
  const int64_t first = std::max<int64_t>(0, hit - window + 1) / block_tokens_;
  BlockHash parent = root_;
  std::vector<int32_t> scratch;
  for (int64_t i = 0; i < count; ++i) {
    auto key = BlockKey(tokens, i, regimes, scratch);
    const BlockHash hash = HashBlock(parent, key);
    if (i < first) {
      blocks_.push_back(kNoBlock);
    } else {
      std::optional<BlockId> block = pool.Lookup(hash, key, parent);
      if (!block) {
        Free(pool);
        return false;
      }
      pool.Retain(*block);
      blocks_.push_back(*block);
    }
    hashes_.push_back(hash);
    parent = hash;
  }
  return true;
}

int32_t BlockTable::NumHeld() const {
  return static_cast<int32_t>(std::count_if(blocks_.begin(), blocks_.end(), [](BlockId b) { return b != kNoBlock; }));
}

std::span<const int32_t> BlockTable::BlockKey(std::span<const int32_t> tokens, int64_t i,
                                              const RegimeBounds& regimes,
                                              std::vector<int32_t>& scratch) const {
  auto block_tokens = tokens.subspan(i * block_tokens_, block_tokens_);
  const int64_t first = i * block_tokens_;
  const int64_t bt = block_tokens_;
  const int64_t selected = std::clamp<int64_t>(regimes.selected - first, 0, bt);
  const int64_t causal = std::clamp<int64_t>(regimes.causal - first, 0, bt);
  // The common cases keep the plain key, or the one marker of a single bound.
  if (selected == 0 && causal == 0) return block_tokens;
  scratch.assign(block_tokens.begin(), block_tokens.end());
  if (selected > 0) scratch.push_back(static_cast<int32_t>(-1 - selected));  // -1 - bt .. -2
  if (causal != selected) scratch.push_back(static_cast<int32_t>(-2 - bt - causal));  // .. -2 - bt
  return scratch;
}

int64_t BlockTable::MatchPrefix(BlockPool& pool, std::span<const int32_t> tokens,
                                const RegimeBounds& regimes) {
  LATENT_CHECK(blocks_.empty());
  if (tokens.empty()) return 0;
  const int64_t max_blocks = static_cast<int64_t>(tokens.size() - 1) / block_tokens_;
  BlockHash parent = root_;
  std::vector<int32_t> scratch;
  for (int64_t i = 0; i < max_blocks; ++i) {
    auto block_tokens = BlockKey(tokens, i, regimes, scratch);
    const BlockHash hash = HashBlock(parent, block_tokens);
    std::optional<BlockId> block = pool.Lookup(hash, block_tokens, parent);
    if (!block) break;
    pool.Retain(*block);
    blocks_.push_back(*block);
    hashes_.push_back(hash);
    parent = hash;
  }
  return static_cast<int64_t>(blocks_.size()) * block_tokens_;
}

void BlockTable::RegisterComputed(BlockPool& pool, std::span<const int32_t> tokens, int64_t computed,
                                  const RegimeBounds& regimes) {
  if (!pool.prefix_caching()) return;
  const int64_t full = std::min<int64_t>(computed / block_tokens_, blocks_.size());
  std::vector<int32_t> scratch;
  for (int64_t i = static_cast<int64_t>(hashes_.size()); i < full; ++i) {
    auto block_tokens = BlockKey(tokens, i, regimes, scratch);
    const BlockHash parent = hashes_.empty() ? root_ : hashes_.back();
    const BlockHash hash = HashBlock(parent, block_tokens);
    if (blocks_[i] != kNoBlock) pool.Register(blocks_[i], hash, block_tokens, parent);
    hashes_.push_back(hash);
  }
}

int64_t BlockTable::ShareFullBlocks(BlockPool& pool, const BlockTable& other, int64_t tokens) {
  LATENT_CHECK(blocks_.empty());
  const int64_t full = tokens / block_tokens_;
  for (int64_t i = 0; i < full; ++i) {
    pool.Retain(other.blocks_[i]);
    blocks_.push_back(other.blocks_[i]);
  }
  hashes_.assign(other.hashes_.begin(),
                 other.hashes_.begin() + std::min<int64_t>(full, other.hashes_.size()));
  return full * block_tokens_;
}

}  // namespace latent::cache
