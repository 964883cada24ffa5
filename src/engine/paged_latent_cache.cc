#include "engine/paged_latent_cache.h"

#include "base/error.h"

namespace latent::engine {
namespace {

cache::PagedRows ViewOf(cache::CacheStorage& storage, model::CacheDType dtype) {
  if (dtype != model::CacheDType::kF32 && dtype != model::CacheDType::kBF16) {
    Fail("the engine caches latent rows in f32 or bf16; ", model::CacheDTypeName(dtype),
         " rows are not supported yet");
  }
  return storage.View(dtype == model::CacheDType::kF32 ? DType::kF32 : DType::kBF16);
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
