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
  const ops::Rope* rope = nullptr;  // The indexer's rotary pairing.
  DsaDims dims;
  DsaSelection* selection = nullptr;  // [T] in/out
};

// x [T, D] (after input_layernorm) -> out [T, D]. Writes the batch's latent rows of `layer`
// into the batch's paged cache, then attends each token over its sequence's rows
// 0..position, or over the positions DSA selected for it when `dsa` is given. `query_scale`
// [T], when given, multiplies each token's query after rope (Llama-4 query scaling).
// `latent_row`: the layer's cache row holding them (LongCat's second MLA of a layer caches a
// second row).
void MlaAttentionForward(const MlaDims& dims, const AttentionWeights& w, const ops::Rope& rope,
                         int64_t layer, const ForwardBatch& batch, const float* x,
                         int64_t hidden, AttentionForm form,
                         const DsaLayer* dsa, float* out, const float* query_scale = nullptr,
                         int latent_row = kLatentRow);

}  // namespace latent::model
