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
#include "model/cache_rows.h"
#include "model/model_config.h"

namespace latent::engine {

struct CacheOptions {
  uint32_t block_tokens = 64;  // FlashMLA's page size.
  int32_t num_blocks = 0;      // 0: as many as fit in memory_gib.
  double memory_gib = 1.0;
  bool prefix_caching = true;
  model::CacheDType dtype = model::CacheDType::kF32;
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

  cache::BlockPool& pool() { return *pool_; }
  const cache::BlockPool& pool() const { return *pool_; }
  const cache::PagedRows& rows() const { return rows_; }
  // An empty block table with this cache's block size.
  cache::BlockTable NewTable() const { return cache::BlockTable(block_tokens_); }

 private:
  uint32_t block_tokens_;
  model::CacheDType dtype_;
  uint64_t bytes_per_token_;
  std::unique_ptr<cache::CacheStorage> storage_;
  std::unique_ptr<cache::BlockPool> pool_;
  cache::PagedRows rows_;
};

}  // namespace latent::engine
