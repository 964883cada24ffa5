// DeepSeek sparse attention (DSA) indexer: for each query token, which cached key positions
// the MLA attention of this layer reads (DESIGN §5). The indexer's key of every token is cached
// as its own row (dsa.index_k) through the same block table as the latent row.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/weight_ref.h"
#include "ops/attention_batch.h"
#include "ops/norm.h"
#include "ops/position_scale.h"
#include "ops/rope.h"

namespace latent::ops {

class AttentionWorkspace;  // ops/attention_workspace.h

// DeepSeek sparse attention's indexer (layers that run one).
struct IndexerWeights {
  kernels::WeightRef wq_b;          // [n_h * d_i, Q]
  kernels::WeightRef wk;            // [d_i, D]
  NormWeight k_norm, k_norm_bias;   // [d_i] LayerNorm weight and bias
  std::vector<float> weights_proj;  // [n_h, D] f32, as transformers keeps it
  // mistral_large4: queries from LayerNorm(x) (weight and bias [D]) instead of the query latent,
  // so wq_b is [n_h * d_i, D]; data null elsewhere.
  NormWeight q_norm, q_norm_bias;
  LogPositionScale query_scale;  // [n_h], before rope; empty: none
  // GLM-5-Next's KPool indexer (ops/kpool.h): the gate score projection and the positional
  // term of the pool softmax; empty elsewhere.
  kernels::WeightRef kpool_gate;   // [d_i, D]
  std::vector<float> kpool_ape;    // [index_kpool, d_i]
};

struct DsaDims {
  int64_t heads = 0;     // index_n_heads
  int64_t head_dim = 0;  // index_head_dim; its first qk_rope_head_dim dims are rotated
  int64_t topk = 0;      // index_topk
  // Hy4: the LAST qk_rope_head_dim dims of a query or key are rotated, not the first.
  bool rope_last = false;
  float k_norm_eps = 1e-6f;  // of the keys' LayerNorm (Hy4: rms_norm_eps)
  // GLM-5-Next: score pools of kpool tokens (ops/kpool_indexer.h); 0: token-wise.
  int64_t kpool = 0;
};

// Per batch token, the key positions it attends to (ascending); empty: all of 0..position.
using DsaSelection = std::vector<std::vector<int32_t>>;

// chosen = the topk (0 < topk < scores.size()) positions of the largest scores, ties to the lower
// position, in ascending order: the indexer's selection. `keys` is scratch.
void SelectTopK(const std::vector<float>& scores, int64_t topk, std::vector<uint64_t>& keys,
                std::vector<int32_t>& chosen);

// x [T, D] (after input_layernorm), q_resid [T, Q] (q_a_layernorm(q_a_proj(x))). Writes the index
// keys of the batch's tokens into its paged cache (row `index_row` of `layer`), then for every
// token whose context (position + 1) exceeds topk keeps the topk positions with the largest
//   sum_h w[h] * relu(q[h] . k[j] / sqrt(head_dim)),  w = weights_proj(x) / sqrt(heads)
// among positions 0..position (ties to the lower position). A shorter context attends densely,
// which is what the top-k would select anyway. With `w.q_norm` (mistral_large4) the queries come
// from LayerNorm(x) instead of q_resid (which may then be null), and with `w.query_scale` each
// head's query is scaled by its log-position factor before rope. `rope` null: no rotation (a
// NoPE layer). `workspace`: the memory kept from step to step (a call without one allocates its
// own).
void RunDsaIndexer(const DsaDims& dims, const IndexerWeights& w, const ops::Rope* rope,
                   int64_t layer, int index_row, const AttentionBatch& batch, const float* x,
                   int64_t hidden, const float* q_resid, int64_t q_lora, DsaSelection& selection,
                   AttentionWorkspace* workspace = nullptr);

}  // namespace latent::ops
