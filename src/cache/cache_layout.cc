#include "cache/cache_layout.h"

#include "base/error.h"

namespace latent::cache {

uint64_t BytesPerToken(const ModelCacheRows& rows) {
  uint64_t total = 0;
  for (const auto& layer : rows)
    for (const auto& row : layer) total += row.bytes_per_token;
  return total;
}

CacheLayout CacheLayout::Build(const ModelCacheRows& rows, uint32_t block_tokens) {
  if (block_tokens == 0) Fail("cache block size must be at least one token");
  CacheLayout layout;
  layout.block_tokens = block_tokens;
  uint64_t offset = 0;
  uint64_t max_align = 1;
  for (const auto& layer : rows) {
    auto& offsets = layout.slab_offset.emplace_back();
    for (const auto& row : layer) {
      LATENT_CHECK(row.align > 0 && (row.align & (row.align - 1)) == 0);
      offset = (offset + row.align - 1) / row.align * row.align;
      offsets.push_back(offset);
      offset += row.bytes_per_token * block_tokens;
      if (row.align > max_align) max_align = row.align;
    }
  }
  // Blocks sit back to back, so each block's size keeps the first slab aligned.
  layout.block_bytes = (offset + max_align - 1) / max_align * max_align;
  return layout;
}

}  // namespace latent::cache
