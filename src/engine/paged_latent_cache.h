// Slot-addressed access to the paged cache's rows, for tools and tests that fill or read rows
// outside a forward pass: slot i is the i-th table given to SetTables. A thin helper over the
// storage's cache::PagedRows view (the model reads and writes rows through that view and the
// block-table rows of its ForwardBatch, not through this class).
#pragma once

#include <vector>

#include "cache/block_table.h"
#include "cache/cache_storage.h"
#include "cache/paged_rows.h"
#include "model/cache_rows.h"
#include "model/model.h"  // CacheRowKind: the row indices callers pass

namespace latent::engine {

class PagedLatentCache {
 public:
  // Values per token of each row of each layer ([layer][row], model::CacheRowValues), which must
  // match the storage's rows, and their storage dtype (f32, bf16 or fp8).
  PagedLatentCache(cache::CacheStorage& storage, const std::vector<std::vector<int64_t>>& row_values,
                   model::CacheDType dtype);

  void SetTables(std::vector<const cache::BlockTable*> tables) { tables_ = std::move(tables); }

  void WriteRow(int64_t layer, int row, int32_t slot, int64_t position, const float* values);
  void GatherRows(int64_t layer, int row, int32_t slot, int64_t count, float* out) const;
  void GatherPositions(int64_t layer, int row, int32_t slot, std::span<const int32_t> positions,
                       float* out) const;
  // Copies every row of positions [0, count) of block `from` into block `to`.
  void CopyBlock(cache::BlockId from, cache::BlockId to, uint32_t count) { rows_.CopyBlock(from, to, count); }

  const cache::PagedRows& rows() const { return rows_; }

 private:
  std::span<const cache::BlockId> Table(int32_t slot) const { return tables_.at(slot)->blocks(); }

  cache::PagedRows rows_;
  std::vector<const cache::BlockTable*> tables_;
};

}  // namespace latent::engine
