#include "engine/paged_latent_cache.h"

#include "base/error.h"

namespace latent::engine {
namespace {

cache::PagedRows ViewOf(cache::CacheStorage& storage, model::CacheDType dtype) {
  switch (dtype) {
    case model::CacheDType::kF32: return storage.View(DType::kF32);
    case model::CacheDType::kBF16: return storage.View(DType::kBF16);
    case model::CacheDType::kFP8: return storage.View(DType::kF8E4M3);
  }
  FailInternal("unknown cache dtype");
}

}  // namespace

PagedLatentCache::PagedLatentCache(cache::CacheStorage& storage,
                                   const std::vector<std::vector<int64_t>>& row_values,
                                   model::CacheDType dtype)
    : rows_(ViewOf(storage, dtype)) {
  LATENT_CHECK(static_cast<int64_t>(row_values.size()) == rows_.num_layers());
  for (size_t l = 0; l < row_values.size(); ++l) {
    for (size_t r = 0; r < row_values[l].size(); ++r) {
      LATENT_CHECK(row_values[l][r] == rows_.Width(static_cast<int64_t>(l), static_cast<int>(r)));
    }
  }
}

void PagedLatentCache::WriteRow(int64_t layer, int row, int32_t slot, int64_t position,
                                const float* values) {
  rows_.WriteRow(Table(slot), layer, row, position, values);
}

void PagedLatentCache::GatherRows(int64_t layer, int row, int32_t slot, int64_t count,
                                  float* out) const {
  rows_.GatherRows(Table(slot), layer, row, count, out);
}

void PagedLatentCache::GatherPositions(int64_t layer, int row, int32_t slot,
                                       std::span<const int32_t> positions, float* out) const {
  rows_.GatherPositions(Table(slot), layer, row, positions, out);
}

}  // namespace latent::engine
