// What one layer caches per token, in bytes. The cache is generic over these rows: it knows
// bytes and block ids, never heads or dtypes (the model layer decides those).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace latent::cache {

enum class Retention : uint8_t {
  kFull,  // Kept for the whole sequence (MLA latent, DSA index keys, full attention).
};

struct CacheRowSpec {
  std::string name;          // "mla.latent", "dsa.index_k", "attn.k", "attn.v"
  uint64_t bytes_per_token;  // Honest bytes of one token's row, not a head size.
  uint32_t align = 64;       // Alignment of the row's slab inside a block.
  Retention retention = Retention::kFull;
};

// The rows of every layer: rows[layer] lists that layer's rows.
using ModelCacheRows = std::vector<std::vector<CacheRowSpec>>;

uint64_t BytesPerToken(const ModelCacheRows& rows);

}  // namespace latent::cache
