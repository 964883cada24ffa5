// CacheManager: the paged cache of one model, built in one place for the engine and the CLI
// tools: the storage of its rows (model::CacheRows in the chosen dtype), the block pool that
// hands blocks out, the view the model reads and writes rows through, and the one block size.
#pragma once

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
  // Throws latent::Error for a zero block size, memory that holds no block, or a row dtype the
  // paged cache cannot store (fp8).
  CacheManager(const model::ModelConfig& config, const CacheOptions& options);

  uint32_t block_tokens() const { return block_tokens_; }
  model::CacheDType dtype() const { return dtype_; }
  int32_t num_blocks() const { return storage_->num_blocks(); }
  // Positions the whole cache holds.
  int64_t capacity_tokens() const { return static_cast<int64_t>(num_blocks()) * block_tokens_; }
  uint64_t bytes_per_token() const { return bytes_per_token_; }
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

 private:
  uint32_t block_tokens_;
  model::CacheDType dtype_;
  uint64_t bytes_per_token_;
  uint64_t bytes_per_sequence_ = 0;
  std::unique_ptr<cache::CacheStorage> storage_;
  std::unique_ptr<cache::StateStorage> state_storage_;
  std::unique_ptr<cache::SlotPool> slot_pool_;
  std::unique_ptr<cache::BlockPool> pool_;
  cache::PagedRows rows_;
};

}  // namespace latent::engine
