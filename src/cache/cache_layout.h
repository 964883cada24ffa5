// Where each (layer, row) lives inside a cache block. A block holds `block_tokens` tokens of every
// row of every layer; row r of layer l for the token at offset t in the block starts at
// block_base + slab_offset[l][r] + t * bytes_per_token. Computed once at start.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/cache_row_spec.h"

namespace latent::cache {

// Tokens per cache block unless a flag or an option says otherwise (FlashMLA's page size): what
// the engine runs with (EngineOptions) and what `latent info` sizes the cache by.
inline constexpr uint32_t kDefaultBlockTokens = 64;

struct CacheLayout {
  uint32_t block_tokens = 0;
  uint64_t block_bytes = 0;                       // Bytes of one block, all slabs, aligned.
  std::vector<std::vector<uint64_t>> slab_offset;  // [layer][row] -> byte offset in a block.

  static CacheLayout Build(const ModelCacheRows& rows, uint32_t block_tokens);
};

// Retention groups (vLLM's hybrid allocator, in miniature): the rows a sequence keeps whole
// (group 0: kFull) and its sliding-window rows (group 1: kWindow) live in blocks of their own, so
// that a window block can be released while the full rows of the same positions stay. Both kinds
// of block come from one pool, so they have one size in bytes: a group-0 block holds
// `block_tokens` tokens of the group-0 rows, a group-1 block `window_block_tokens` tokens of the
// window rows: a multiple of block_tokens when window rows are the smaller, else a divisor of it
// (as many as fit in the same bytes), so that one group's block boundaries are the other's and a
// prefix hit can end on both.
struct GroupedLayout {
  bool has_window = false;
  ModelCacheRows full_rows, window_rows;  // `rows` with the other group's rows at 0 bytes
  CacheLayout full, window;               // slabs of each group's blocks
  uint64_t block_bytes = 0;               // of every block, either group
  uint32_t window_block_tokens = 0;
  // Positions where both groups' blocks end: max(block_tokens, window_block_tokens).
  uint32_t common_block_tokens() const;

  static GroupedLayout Build(const ModelCacheRows& rows, uint32_t block_tokens);
};

}  // namespace latent::cache
