// `latent info --model DIR` where DIR holds config.json and no weights: the model described from
// its config alone. Every figure comes from what the loader and the engine use, not from a formula
// of its own: parameters and weight bytes from the family's one tensor list (Arch::tensors, the
// list that validates, loads and quantizes a checkpoint) through LoadedWeightBytes, the cache from
// the family's cache-row declarations (Arch::cache_rows) through the engine's CacheLayout, and the
// expert-parallel shares from the loader's ExpertShard.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/cache_layout.h"  // kDefaultBlockTokens
#include "cache/cache_row_spec.h"
#include "model/model_config.h"

namespace latent::cli {

struct ConfigInfoOptions {
  std::string cache_dtype = "auto";
  uint32_t block_tokens = cache::kDefaultBlockTokens;
  int64_t context = 0;    // tokens per sequence; 0: the config's max_position_embeddings
  int64_t sequences = 1;  // sequences held at once
  int ranks = 1;          // expert-parallel ranks (1: one process)
};

// The most ranks a config-only description lists (each rank walks the tensor list).
constexpr int kMaxInfoRanks = 1024;

// The description `latent info --json` prints for config.json alone ("source": "config.json"):
// parameters; weight bytes as a bf16 checkpoint, as an fp8-block one (the hub's format) and
// loaded with --quantize int8 from bf16; each layer's cache rows; cache bytes per token, per
// sequence and at `context` tokens for `sequences` sequences; for hybrid models what an all-MLA
// model of the same layer count would cache; with ranks > 1 each rank's experts, weight and cache
// bytes. Throws latent::Error for a config whose sizes no model could have, naming the keys.
nlohmann::json ConfigInfo(const model::ModelConfig& config, const std::string& dir,
                          const ConfigInfoOptions& options);

// Text form of ConfigInfo's JSON.
void PrintConfigInfo(const nlohmann::json& info);

// The values latent runs the model with where config.json may omit them (the family's defaults,
// transformers' class defaults, filled in): `latent info`'s "config" object, in both forms.
nlohmann::json ResolvedConfigJson(const model::ModelConfig& c);

// Each layer's cache rows as `latent info` prints them (checkpoint and config-only forms alike):
// name, values, bytes per token or per sequence, retention, block offset, window, KV source.
nlohmann::json LayersJson(const model::ModelConfig& c, const cache::ModelCacheRows& rows,
                          const cache::CacheLayout& layout);

// The cache `sequences` sequences of `context` tokens take: whole blocks of `block_tokens` (as
// the engine allocates them; window rows only for the blocks of the last window), plus each
// sequence's per-sequence state. Throws latent::Error when the bytes do not fit in 63 bits.
nlohmann::json CacheAtContext(const cache::ModelCacheRows& rows, uint32_t block_tokens,
                              int64_t context, int64_t sequences);

}  // namespace latent::cli
