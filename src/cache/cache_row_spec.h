// What one layer caches, in bytes. The cache is generic over these rows: it knows bytes, block ids
// and how a row's values are encoded, never heads (the model layer decides those; each family's
// arch file declares its layers' rows, model/cache_rows.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace latent::cache {

enum class Retention : uint8_t {
  kFull,         // One row per token, kept for the whole sequence (MLA latent, DSA index keys).
  kPerSequence,  // One fixed-size state per sequence, overwritten each step (the recurrent state
                 // of a linear-attention layer): bytes_per_sequence, no per-token bytes.
  kWindow,       // One row per token, read only while the token is among the last window_tokens
                 // positions of its sequence (sliding-window attention): older rows may be
                 // dropped, so a sequence needs O(window) of them, not O(context).
};

struct CacheRowSpec {
  std::string name;              // "mla.latent", "dsa.index_k", "attn.k", "linear.state"
  uint64_t bytes_per_token = 0;  // kFull: honest bytes of one token's row, not a head size.
  uint32_t align = 64;           // Alignment of the row's slab inside a block.
  Retention retention = Retention::kFull;
  int64_t values = 0;               // Values the model writes and reads per token (or sequence).
  uint64_t bytes_per_sequence = 0;  // kPerSequence: bytes of one sequence's state.
  // kWindow: the token at position p reads the rows of positions (p - window_tokens, p].
  int64_t window_tokens = 0;
  // How the row's values are stored. 0: plain elements of the cache's dtype (f32 or bf16; bf16
  // in an fp8 cache). > 0: the fp8 encoding of cache/fp8_rows.h, the first fp8_values values as
  // e4m3 in groups of 128 with one f32 scale each, the rest as bf16 (FlashMLA's latent row:
  // fp8_values = kv_lora_rank); bytes_per_token is then Fp8RowBytes(values, fp8_values).
  int64_t fp8_values = 0;
};

// The rows of every layer: rows[layer] lists that layer's rows.
using ModelCacheRows = std::vector<std::vector<CacheRowSpec>>;

// Bytes per token of the per-token rows, kFull and kWindow (kPerSequence rows take none).
uint64_t BytesPerToken(const ModelCacheRows& rows);
// Bytes of one sequence's state (the kPerSequence rows): cache/state_slots.h.
uint64_t BytesPerSequence(const ModelCacheRows& rows);

}  // namespace latent::cache
