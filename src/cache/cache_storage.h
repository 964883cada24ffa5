// CacheStorage: the bytes of all blocks, one allocation, laid out by CacheLayout. Hands out the
// address of (block, layer, row, token-in-block); never interprets the bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/error.h"
#include "cache/cache_layout.h"
#include "cache/paged_rows.h"

namespace latent::cache {

// A cache larger than the machine's memory. what() advises the engine's flags (--num-blocks,
// --cache-memory); a tool that sizes the cache by other flags builds its own advice from
// shortfall(), the sizes alone.
class CacheTooLarge : public Error {
 public:
  explicit CacheTooLarge(const std::string& shortfall)
      : Error(shortfall + ": lower --num-blocks or --cache-memory"), shortfall_(shortfall) {}
  const std::string& shortfall() const { return shortfall_; }

 private:
  std::string shortfall_;
};

class CacheStorage {
 public:
  CacheStorage(ModelCacheRows rows, uint32_t block_tokens, int32_t num_blocks);
  // Blocks laid out by retention groups (GroupedLayout): RowAt addresses group-0 rows only.
  CacheStorage(const ModelCacheRows& rows, const GroupedLayout& groups, int32_t num_blocks);

  const CacheLayout& layout() const { return layout_; }
  const ModelCacheRows& rows() const { return rows_; }
  int32_t num_blocks() const { return num_blocks_; }
  uint64_t total_bytes() const { return layout_.block_bytes * static_cast<uint64_t>(num_blocks_); }

  uint8_t* RowAt(int32_t block, int64_t layer, int64_t row, uint32_t token_in_block) {
    return data_.get() + static_cast<uint64_t>(block) * layout_.block_bytes +
           layout_.slab_offset[layer][row] + token_in_block * rows_[layer][row].bytes_per_token;
  }
  const uint8_t* RowAt(int32_t block, int64_t layer, int64_t row, uint32_t token_in_block) const {
    return const_cast<CacheStorage*>(this)->RowAt(block, layer, row, token_in_block);
  }

  // The plain view of these bytes: `dtype` f32 or bf16 (every row), or F8_E4M3 (fp8 rows).
  PagedRows View(DType dtype) {
    return groups_.has_window ? PagedRows::OfGroups(data_.get(), all_rows_, groups_, num_blocks_, dtype)
                              : PagedRows::Of(data_.get(), rows_, layout_, num_blocks_, dtype);
  }

  // Number of blocks that fit in `bytes` (at least 0).
  static int32_t BlocksForBytes(const ModelCacheRows& rows, uint32_t block_tokens, uint64_t bytes);

 private:
  ModelCacheRows rows_;
  CacheLayout layout_;
  int32_t num_blocks_;
  GroupedLayout groups_;     // has_window false unless built from groups
  ModelCacheRows all_rows_;  // every row, with groups
  CacheStorage(ModelCacheRows rows, uint32_t block_tokens, int32_t num_blocks, const GroupedLayout& groups);
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, FreeDeleter> data_;
};

}  // namespace latent::cache
