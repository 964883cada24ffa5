// GLM-5-Next's KPool DSA indexer (transformers' Glm5NextTextIndexer): the indexer scores pools
// of `pool` consecutive tokens (from position 0) instead of single tokens. Each token caches its
// key k = LayerNorm(wk x) and a gate score s = kpool_gate x (the "packed" row [k | s], 2 d_i
// values). A pool's key weights its tokens per channel:
//   pool_key[c] = sum_i softmax_i(s[i][c] + ape[i][c]) * k[i][c]           (i over the pool)
// A pool is eligible for a query at position p once it is complete and visible (its last token
// <= p); pools score as V3.2's indexer scores tokens (sum_h w[h] relu(q[h] . key / sqrt(d_i)))
// and the top topk / pool of them are expanded to their tokens, plus the incomplete tail pool
// (the last (p + 1) % pool tokens), which is always attended.
#pragma once

#include <cstdint>
#include <vector>

namespace latent::ops {

struct KPoolDims {
  int64_t head_dim = 0;    // d_i
  int64_t pool = 16;       // index_kpool: tokens per pool
  int64_t topk_pools = 0;  // index_topk / index_kpool: pools a query keeps
  int64_t packed() const { return 2 * head_dim; }  // [k | gate score] per token
};

// pool_keys [pools, d_i] of the complete pools 0..pools-1 from the packed rows of their tokens
// packed [pools * pool, 2 d_i] and the positional term ape [pool, d_i]. In f32, softmax with the
// max subtracted, the weighted sum in token order.
void KPoolKeys(const KPoolDims& dims, const float* packed, int64_t pools, const float* ape,
               float* pool_keys);

// The positions a query at `position` attends to, ascending, given the scores of the eligible
// pools pool_scores [(position + 1) / pool]: the tokens of the topk_pools best pools (ties to the
// lower pool) and of the tail. Empty when every eligible pool is kept: the query attends to all
// of 0..position (what the selection would hold). `order` is scratch.
void KPoolSelect(const KPoolDims& dims, const std::vector<float>& pool_scores, int64_t position,
                 std::vector<int32_t>& order, std::vector<int32_t>& chosen);

}  // namespace latent::ops
