// The rows each layer of a model caches per token, and the element types they may use.
#pragma once

#include <string>

#include "cache/cache_row_spec.h"
#include "model/model_config.h"

namespace latent::model {

enum class CacheDType : uint8_t {
  kF32,
  kBF16,
  // DeepSeek's FP8 latent layout: the latent in e4m3 with one f32 scale per 128 values, and the
  // rotary key in bf16 (656 bytes for DeepSeek V3 dims).
  kFP8,
};

// "auto" follows the checkpoint: f32 checkpoints cache f32 (exact parity with the reference),
// everything else caches bf16. Throws latent::Error for an unknown name.
CacheDType ParseCacheDType(const std::string& name, const ModelConfig& config);
const char* CacheDTypeName(CacheDType dtype);

// Values of the MLA latent row: kv_lora_rank + qk_rope_head_dim (576 for DeepSeek V3).
int64_t MlaLatentRowValues(const ModelConfig& config);
// Bytes of one token's MLA latent row in `dtype`.
uint64_t MlaLatentRowBytes(const ModelConfig& config, CacheDType dtype);

// Values per token of each row of each layer: [layer][row], rows in CacheRowKind order:
// "mla.latent" for every layer, plus "dsa.index_k" for layers that run a DSA indexer.
std::vector<std::vector<int64_t>> CacheRowValues(const ModelConfig& config);
// Values per token of each row kind: {latent, index key (DSA only)}.
std::vector<int64_t> CacheRowWidths(const ModelConfig& config);

// The rows above, in bytes of `dtype`.
cache::ModelCacheRows CacheRows(const ModelConfig& config, CacheDType dtype);

}  // namespace latent::model
