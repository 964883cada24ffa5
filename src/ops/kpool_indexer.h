// GLM-5-Next's KPool DSA indexer over a packed batch (the math is ops/kpool.h): writes each
// token's packed row [LayerNorm(wk x) | kpool_gate x] (the layer's dsa.kpool row), and where the
// token completes a pool, replaces the key half of that row with the pool's key (computed once,
// from the pool's stored rows); then for every token with more complete visible pools than it
// keeps, scores the pools' keys in place and selects the tokens of its best pools plus the
// incomplete tail pool. No rotary part (GLM-5-Next is all NoPE).
#pragma once

#include <cstdint>

#include "ops/dsa_indexer.h"

namespace latent::ops {

// As RunDsaIndexer (dsa_indexer.h) for dims.kpool > 0: x [T, D] after input_layernorm, q_resid
// [T, Q] the query latent; `index_row` the layer's dsa.kpool row.
void RunKPoolIndexer(const DsaDims& dims, const IndexerWeights& w, int64_t layer, int index_row,
                     const AttentionBatch& batch, const float* x, int64_t hidden, const float* q_resid,
                     DsaSelection& selection);

}  // namespace latent::ops
