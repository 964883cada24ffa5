// The paged cache seen by the model: rows addressed through each slot's block table.
// slot = the sequence's index in this step's batch; position p of a sequence lives in block
// table[p / block_tokens] at offset p % block_tokens.
#pragma once

#include <vector>

#include "cache/block_table.h"
#include "cache/cache_storage.h"
#include "model/cache_rows.h"
#include "model/model.h"

namespace latent::engine {

class PagedLatentCache : public model::LatentCache {
 public:
  // Values per token of each row of each layer ([layer][row], model::CacheRowValues) and their
  // storage dtype (f32 or bf16).
  PagedLatentCache(cache::CacheStorage& storage, std::vector<std::vector<int64_t>> row_values,
                   model::CacheDType dtype);

  // The block tables of this step's slots.
  void SetTables(std::vector<const cache::BlockTable*> tables) { tables_ = std::move(tables); }

  void WriteRow(int64_t layer, int row, int32_t slot, int64_t position, const float* values) override;
  void GatherRows(int64_t layer, int row, int32_t slot, int64_t count, float* out) const override;
  void GatherPositions(int64_t layer, int row, int32_t slot, std::span<const int32_t> positions,
                       float* out) const override;

  // Copies every row of positions [0, count) of block `from` into block `to` (forking a
  // partially filled block).
  void CopyBlock(cache::BlockId from, cache::BlockId to, uint32_t count);

 private:
  const uint8_t* Locate(int64_t layer, int row, int32_t slot, int64_t position) const;
  // One stored row of `width` values to f32.
  void CopyOut(const uint8_t* src, int64_t width, float* dst) const;

  cache::CacheStorage& storage_;
  std::vector<std::vector<int64_t>> row_values_;
  model::CacheDType dtype_;
  std::vector<const cache::BlockTable*> tables_;
};

}  // namespace latent::engine
