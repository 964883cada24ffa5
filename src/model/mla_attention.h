// Multi-head latent attention of one layer over a packed batch, in either form (DESIGN §5).
#pragma once

#include "model/deepseek_weights.h"
#include "model/dsa_indexer.h"
#include "model/model.h"
#include "ops/rope.h"

namespace latent::model {

struct MlaDims {
  int64_t heads, q_lora, latent, nope, rope, v;  // H, Q (0: none), C, dn, dr, dv
  // LongCat's LoRA scales (ModelConfig::mla_q_scale, mla_latent_scale); 1 elsewhere.
  float q_scale = 1.0f, latent_scale = 1.0f;
  // dots3_note: q_a_layernorm(q_a) times q_a_scale before q_b (the DSA indexer reads it scaled
  // too); 1 elsewhere. The eps of the q_a, kv_a and k_rope norms (transformers' DeepSeek 1e-6).
  float q_a_scale = 1.0f;
  float norm_eps = 1e-6f;
  int64_t qk() const { return nope + rope; }
  int64_t row() const { return latent + rope; }  // floats of a cached latent row
};

MlaDims MlaDimsOf(const ModelConfig& config);

// True when the expanded form costs fewer FLOPs for a chunk of `chunk_tokens` new tokens: it
// rebuilds k_nope/v of every attended token once (C*(dn+dv) per token and head), while the
// absorbed form pays per query token for folding W_UK/W_UV and for attending over 576-wide rows.
bool PreferExpanded(const MlaDims& dims, int64_t chunk_tokens);

// DeepSeek sparse attention of one layer: its indexer (null on GLM "shared" layers, which reuse
// the selection the previous layer left in `selection`).
struct DsaLayer {
  const IndexerWeights* indexer = nullptr;
  const ops::Rope* rope = nullptr;  // The indexer's rotary pairing; null: no rotation (NoPE layer).
  DsaDims dims;
  DsaSelection* selection = nullptr;  // [T] in/out
  int index_row = kIndexRow;  // The layer's dsa.index_k row (0 on a layer caching no latent).
};

// Where a layer's latent rows come from (KV sharing) and per-head query factors.
struct MlaLayerOptions {
  // The cache layer whose latent rows (row `latent_row`) the layer attends to; -1: its own. A
  // layer reading another layer's rows computes no latent and writes nothing: it only rotates its
  // queries (the owner's keys are rotated already) and attends.
  int64_t latent_layer = -1;
  // [T, H] factors of each head's query after rope (learned log-position scaling); null: none.
  const float* head_query_scale = nullptr;
  // Sliding-window attention: the token at position p attends to positions (p - window, p]
  // only, and only those rows are read (older ones may have been dropped); 0: causal.
  int64_t window = 0;
};

// x [T, D] (after input_layernorm) -> out [T, D]. Writes the batch's latent rows of `layer`
// into the batch's paged cache, then attends each token over its sequence's rows
// 0..position, or over the positions DSA selected for it when `dsa` is given. `query_scale`
// [T], when given, multiplies each token's query after rope (Llama-4 query scaling).
// `latent_row`: the layer's cache row holding them (LongCat's second MLA of a layer caches a
// second row). `dims.rope` 0: a NoPE layer (no rotary part, `rope` unused). `options`: see
// MlaLayerOptions.
void MlaAttentionForward(const MlaDims& dims, const AttentionWeights& w, const ops::Rope& rope,
                         int64_t layer, const ForwardBatch& batch, const float* x,
                         int64_t hidden, AttentionForm form,
                         const DsaLayer* dsa, float* out, const float* query_scale = nullptr,
                         int latent_row = kLatentRow, const MlaLayerOptions* options = nullptr);

}  // namespace latent::model
