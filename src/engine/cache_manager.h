// CacheManager: the paged cache of one model, built in one place for the engine and the CLI
// tools: the storage of its rows (model::CacheRows in the chosen dtype), the block pool that
// hands blocks out, the view the model reads and writes rows through, and the one block size.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "cache/block_pool.h"
#include "cache/block_table.h"
#include "cache/cache_storage.h"
#include "cache/paged_rows.h"
#include "cache/state_slots.h"
#include "model/cache_rows.h"
#include "model/model_config.h"

namespace latent::engine {

struct CacheOptions {
  uint32_t block_tokens = 64;  // FlashMLA's page size.
  int32_t num_blocks = 0;      // 0: as many as fit in memory_gib.
  double memory_gib = 1.0;
  bool prefix_caching = true;
  model::CacheDType dtype = model::CacheDType::kF32;
  // Sequences that can hold per-sequence state at once (hybrid models with linear-attention
  // layers; ignored otherwise): the engine passes its max_seqs. Under a memory budget
  // (num_blocks 0) the state takes at most half of memory_gib, fewer slots if need be.
  int32_t state_slots = 1;
};

class CacheManager {
 public:
  // Throws latent::Error for a zero block size or memory that holds no block.
  CacheManager(const model::ModelConfig& config, const CacheOptions& options);
  // Blocks that hold `tokens` positions of one sequence in every block table it has (full rows,
  // and window rows before any is released), for tools that size a cache for one sequence.
  static int32_t BlocksToHold(const model::ModelConfig& config, const CacheOptions& options, int64_t tokens);

  uint32_t block_tokens() const { return block_tokens_; }
  model::CacheDType dtype() const { return dtype_; }
  int32_t num_blocks() const { return storage_->num_blocks(); }
  // Positions the whole cache holds.
  // With window rows, a sequence also holds window blocks: those of the window and of a chunk,
  // counted here as if it held all of them (a bound: they are released as it advances).
  int64_t capacity_tokens() const {
    if (!has_window()) return static_cast<int64_t>(num_blocks()) * block_tokens_;
    // A step of a window sequence holds the window blocks of under two windows where its chunk is
    // at most a window long, which it always may be (a longer one runs only in the blocks left:
    // Scheduler::ExtendWindowChunks): the rest of the pool holds its full rows.
    const int64_t w = window_block_tokens_;
    const int64_t window_blocks = (2 * window_tokens_ + w - 1) / w + 1;
    return std::max<int64_t>(0, num_blocks() - window_blocks - 1) * block_tokens_;
  }
  uint64_t bytes_per_token() const { return bytes_per_token_; }
  // Bytes per token of the widest layer (all its per-token rows): 656 for a DeepSeek V3 layer in
  // fp8 rows, 1152 in bf16. Most families' layers are alike; dots3_note's differ.
  uint64_t layer_bytes_per_token() const { return layer_bytes_per_token_; }
  // Bytes of one sequence's per-sequence state (0: the model has none), and how many slots exist.
  uint64_t bytes_per_sequence() const { return bytes_per_sequence_; }
  int32_t state_slots() const { return rows_.states.num_slots; }
  // The state slots' free list: null when the model has no per-sequence state.
  cache::SlotPool* slot_pool() { return slot_pool_.get(); }

  cache::BlockPool& pool() { return *pool_; }
  const cache::BlockPool& pool() const { return *pool_; }
  const cache::PagedRows& rows() const { return rows_; }
  // An empty block table with this cache's block size.
  cache::BlockTable NewTable() const { return cache::BlockTable(block_tokens_); }
  // Sliding-window rows (Retention::kWindow): they live in blocks of their own (retention group
  // 1, cache::GroupedLayout) of window_block_tokens() tokens, addressed by a second block table
  // per sequence; window_tokens() is the widest window. has_window() false: none.
  bool has_window() const { return window_tokens_ > 0; }
  int64_t window_tokens() const { return window_tokens_; }
  uint32_t window_block_tokens() const { return window_block_tokens_; }
  cache::BlockTable NewWindowTable() const { return cache::BlockTable(window_block_tokens_); }

 private:
  uint32_t block_tokens_;
  model::CacheDType dtype_;
  uint64_t bytes_per_token_;
  uint64_t layer_bytes_per_token_ = 0;
  int64_t window_tokens_ = 0;
  uint32_t window_block_tokens_ = 0;
  uint64_t bytes_per_sequence_ = 0;
  std::unique_ptr<cache::CacheStorage> storage_;
  std::unique_ptr<cache::StateStorage> state_storage_;
  std::unique_ptr<cache::SlotPool> slot_pool_;
  std::unique_ptr<cache::BlockPool> pool_;
  cache::PagedRows rows_;
};

}  // namespace latent::engine
