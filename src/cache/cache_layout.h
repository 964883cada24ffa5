// Where each (layer, row) lives inside a cache block. A block holds `block_tokens` tokens of every
// row of every layer; row r of layer l for the token at offset t in the block starts at
// block_base + slab_offset[l][r] + t * bytes_per_token. Computed once at start.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/cache_row_spec.h"

namespace latent::cache {

struct CacheLayout {
  uint32_t block_tokens = 0;
  uint64_t block_bytes = 0;                       // Bytes of one block, all slabs, aligned.
  std::vector<std::vector<uint64_t>> slab_offset;  // [layer][row] -> byte offset in a block.

  static CacheLayout Build(const ModelCacheRows& rows, uint32_t block_tokens);
};

}  // namespace latent::cache
