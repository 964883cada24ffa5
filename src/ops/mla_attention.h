// Multi-head latent attention of one layer over a packed batch, in either form (DESIGN §5), on its
// own dims and weights (model/attention_dims.h builds MlaDims from a ModelConfig).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/weight_ref.h"
#include "ops/attention_batch.h"
#include "ops/dsa_indexer.h"
#include "ops/norm.h"
#include "ops/position_scale.h"
#include "ops/rope.h"

namespace latent::ops {

class AttentionWorkspace;  // ops/attention_workspace.h

// The weights of one MLA layer.
struct AttentionWeights {
  std::optional<kernels::WeightRef> q_proj;  // [H*dqk, D] when q_lora_rank is null
  std::optional<kernels::WeightRef> q_a;     // [Q, D]
  NormWeight q_a_norm;                       // [Q]
  std::optional<kernels::WeightRef> q_b;     // [H*dqk, Q]
  // A.X-K2's fused query and output gate, in place of q_b: [H*(dqk+dv), 2Q] over
  // [q_a_layernorm(q_a) | q_a], per head dqk query rows then dv gate rows (ops/output_gate.h).
  std::optional<kernels::WeightRef> q_gate;
  kernels::WeightRef kv_a;                   // [C+R, D]
  NormWeight kv_a_norm;                      // [C]
  kernels::WeightRef kv_b;                   // [H*(dn+dv), C]: per head dn k_nope rows, dv v rows
  // kv_b's key rows transposed per head, [H*C, dn] (head h's W_UK^T at rows h*C ..), made at load
  // where kv_b is bf16, or fp8 with scale blocks whole per head, under bf16 compute and the
  // kernels pack weights: the absorbed form then folds W_UK into the queries with the packed
  // linear (vdpbf16ps or AMX) instead of an f32 transposed_linear over kv_b. Absent elsewhere
  // (the fold reads kv_b's rows as stored).
  std::optional<kernels::WeightRef> uk_t;
  kernels::WeightRef o;                      // [D, H*dv]
  // Learned log-position query scaling (mistral_large4's ssmax_scaling), after rope; empty where
  // none.
  LogPositionScale query_scale;  // [H]
  // dots3_note: RMSNorm of the rotary key before rope (k_rope_only_layernorm) [dr], data null:
  // none.
  NormWeight k_rope_norm;
  // The output gate logits from the layer input (Hy4, dots3_note's g_proj): [H*w, D], w = dv (per
  // channel) or 1 (per head); applied as sigmoid before o_proj (ops/output_gate.h). Absent elsewhere.
  std::optional<kernels::WeightRef> gate_proj;
  // Hy4's learned attention-sink logit per head (kernels/attention.h), f32; empty: none.
  std::vector<float> sinks;  // [H]
};

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

// True when the expanded form costs fewer FLOPs for a chunk of `chunk_tokens` new tokens: it
// rebuilds k_nope/v of every attended token once (C*(dn+dv) per token and head), while the
// absorbed form pays per query token for folding W_UK/W_UV and for attending over 576-wide rows.
bool PreferExpanded(const MlaDims& dims, int64_t chunk_tokens);

// DeepSeek sparse attention of one layer: its indexer (null on GLM "shared" layers, which reuse
// the selection the previous layer left in `selection`).
struct DsaLayer {
  const IndexerWeights* indexer = nullptr;
  const Rope* rope = nullptr;  // The indexer's rotary pairing; null: no rotation (NoPE layer).
  DsaDims dims;
  DsaSelection* selection = nullptr;  // [T] in/out
  // The layer's dsa.index_k row: 1 after mla.latent (model::kIndexRow), 0 on a layer caching no
  // latent.
  int index_row = 1;
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
// `latent_row`: the layer's cache row holding them (0, model::kLatentRow, unless the layer caches
// more: LongCat's second MLA of a layer caches a second row). `dims.rope` 0: a NoPE layer (no rotary part, `rope` unused). `options`: see
// MlaLayerOptions. `workspace`: the memory kept from step to step (a call without one allocates its
// own).
void MlaAttentionForward(const MlaDims& dims, const AttentionWeights& w, const Rope& rope,
                         int64_t layer, const AttentionBatch& batch, const float* x,
                         int64_t hidden, AttentionForm form,
                         const DsaLayer* dsa, float* out, const float* query_scale = nullptr,
                         int latent_row = 0, const MlaLayerOptions* options = nullptr,
                         AttentionWorkspace* workspace = nullptr);

}  // namespace latent::ops
