#include "cache/cache_layout.h"

#include <algorithm>

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

GroupedLayout GroupedLayout::Build(const ModelCacheRows& rows, uint32_t block_tokens) {
  GroupedLayout g;
  g.full_rows = rows;
  g.window_rows = rows;
  for (size_t l = 0; l < rows.size(); ++l) {
    for (size_t r = 0; r < rows[l].size(); ++r) {
      const bool window = rows[l][r].retention == Retention::kWindow;
      g.has_window = g.has_window || window;
      (window ? g.full_rows : g.window_rows)[l][r].bytes_per_token = 0;
    }
  }
  g.full = CacheLayout::Build(g.full_rows, block_tokens);
  g.block_bytes = g.full.block_bytes;
  if (!g.has_window) return g;
  const uint64_t per_token = BytesPerToken(g.window_rows);
  const uint64_t full_per_token = BytesPerToken(g.full_rows);
  uint32_t tokens = block_tokens;
  if (full_per_token >= per_token) {
    tokens = block_tokens * static_cast<uint32_t>(full_per_token / per_token);
  } else {
    for (uint32_t k = 1; k <= block_tokens; ++k) {  // the largest divisor that fits
      if (block_tokens % k == 0 && (block_tokens / k) * per_token <= g.full.block_bytes) {
        tokens = block_tokens / k;
        break;
      }
      tokens = 1;
    }
  }
  g.window = CacheLayout::Build(g.window_rows, tokens);
  g.window_block_tokens = tokens;
  g.block_bytes = std::max(g.full.block_bytes, g.window.block_bytes);
  return g;
}

uint32_t GroupedLayout::common_block_tokens() const {
  return std::max(full.block_tokens, has_window ? window_block_tokens : 0u);
}

}  // namespace latent::cache
