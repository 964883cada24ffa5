// The rows each layer of a model caches, described once: each family's arch file declares its
// layers' rows (Arch::cache_rows, in the style of vLLM's get_kv_cache_spec) from the row pieces
// below, and every other view (values per row, bytes per token, the layout) derives from that
// one ModelCacheRows.
#pragma once

#include <string>
#include <vector>

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
// everything else caches bf16. Throws latent::Error for an unknown name, named as the flag every
// command takes ("--cache-dtype: unknown cache dtype ..."); latent.LLM checks its cache_dtype
// keyword before, in its own name.
CacheDType ParseCacheDType(const std::string& name, const ModelConfig& config);
const char* CacheDTypeName(CacheDType dtype);

// Row pieces the families compose.
// "mla.latent": [kv_a_layernorm(c_kv) | rotated k_pe], kv_lora_rank + qk_rope_head_dim values (576
// for DeepSeek V3).
cache::CacheRowSpec MlaLatentRow(const ModelConfig& config, CacheDType dtype);
// The latent row of a layer rotating `rope_dims` dims (config.RopeDims(layer)): kv_lora_rank values
// alone on a NoPE layer.
cache::CacheRowSpec MlaLatentRow(const ModelConfig& config, CacheDType dtype, int64_t rope_dims);
// "dsa.index_k": the DSA indexer's key, index_head_dim values.
cache::CacheRowSpec DsaIndexKeyRow(const ModelConfig& config, CacheDType dtype);
// The cache row of a KPool indexer layer (GLM-5-Next, ops/kpool_indexer.h): "dsa.kpool",
// 2 * index_head_dim values per token, [LayerNorm(wk x) | kpool_gate x].
cache::CacheRowSpec KPoolIndexRow(const ModelConfig& config, CacheDType dtype);

// A KDA layer's per-sequence state (Retention::kPerSequence, always f32, ops/kda.h):
// "kda.conv" the short convolution's last K-1 inputs [K-1, 3C], "kda.state" the recurrent state
// at the current chunk's start [H, dk, dv], "kda.block" the current chunk's rows so far.
std::vector<cache::CacheRowSpec> KdaStateRows(const ModelConfig& config);
enum KdaStateRow : int { kKdaConvRow = 0, kKdaStateRow = 1, kKdaBlockRow = 2 };
// A KDA hybrid's rows (kimi_linear, bailing_hybrid): the state rows on its linear-attention
// layers, the MLA latent row on the others.
cache::ModelCacheRows KdaHybridRows(const ModelConfig& config, CacheDType dtype);

// The rows of every layer of `config` stored as `dtype`: its family's declaration.
cache::ModelCacheRows CacheRows(const ModelConfig& config, CacheDType dtype);

// Values per token of each row of each layer, [layer][row]: CacheRows' `values`.
std::vector<std::vector<int64_t>> CacheRowValues(const ModelConfig& config);

}  // namespace latent::model
