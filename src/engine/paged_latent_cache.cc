#include "engine/paged_latent_cache.h"

#include <cstring>

#include "base/error.h"
#include "tensor/dtype.h"

namespace latent::engine {

PagedLatentCache::PagedLatentCache(cache::CacheStorage& storage,
                                   std::vector<std::vector<int64_t>> row_values, model::CacheDType dtype)
    : storage_(storage), row_values_(std::move(row_values)), dtype_(dtype) {
  if (dtype != model::CacheDType::kF32 && dtype != model::CacheDType::kBF16) {
    Fail("the engine caches latent rows in f32 or bf16; ", model::CacheDTypeName(dtype),
         " rows are not supported yet");
  }
}

const uint8_t* PagedLatentCache::Locate(int64_t layer, int row, int32_t slot, int64_t position) const {
  const cache::BlockTable& table = *tables_.at(slot);
  const uint32_t bt = table.block_tokens();
  LATENT_CHECK(position < table.capacity());
  return storage_.RowAt(table.blocks()[position / bt], layer, row, static_cast<uint32_t>(position % bt));
}

void PagedLatentCache::WriteRow(int64_t layer, int row, int32_t slot, int64_t position,
                                const float* values) {
  uint8_t* dst = const_cast<uint8_t*>(Locate(layer, row, slot, position));
  const int64_t width = row_values_[layer][row];
  if (dtype_ == model::CacheDType::kF32) {
    std::memcpy(dst, values, width * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < width; ++i) {
    const uint16_t v = F32ToBF16(values[i]);
    std::memcpy(dst + 2 * i, &v, 2);
  }
}

void PagedLatentCache::CopyOut(const uint8_t* src, int64_t width, float* dst) const {
  if (dtype_ == model::CacheDType::kF32) {
    std::memcpy(dst, src, width * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < width; ++i) {
    uint16_t v;
    std::memcpy(&v, src + 2 * i, 2);
    dst[i] = BF16ToF32(v);
  }
}

void PagedLatentCache::GatherRows(int64_t layer, int row, int32_t slot, int64_t count,
                                  float* out) const {
  const int64_t width = row_values_[layer][row];
  for (int64_t p = 0; p < count; ++p) CopyOut(Locate(layer, row, slot, p), width, out + p * width);
}

void PagedLatentCache::GatherPositions(int64_t layer, int row, int32_t slot,
                                       std::span<const int32_t> positions, float* out) const {
  const int64_t width = row_values_[layer][row];
  for (size_t i = 0; i < positions.size(); ++i) {
    CopyOut(Locate(layer, row, slot, positions[i]), width, out + i * width);
  }
}

void PagedLatentCache::CopyBlock(cache::BlockId from, cache::BlockId to, uint32_t count) {
  const auto& rows = storage_.rows();
  for (size_t layer = 0; layer < rows.size(); ++layer) {
    for (size_t r = 0; r < rows[layer].size(); ++r) {
      std::memcpy(storage_.RowAt(to, layer, r, 0), storage_.RowAt(from, layer, r, 0),
                  rows[layer][r].bytes_per_token * count);
    }
  }
}

}  // namespace latent::engine
