#include "ops/kpool_indexer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/dump.h"
#include "base/error.h"
#include "kernels/kernel_table.h"
#include "kernels/linear.h"
#include "ops/attended_rows.h"
#include "ops/kpool.h"
#include "threads/thread_pool.h"

namespace latent::ops {
namespace {

// Every token of the batch that completes a pool (position + 1 a multiple of the pool) replaces
// the key half of its cached row with its pool's key, computed from the pool's stored rows (its
// own as stored, so the key depends on the pool's tokens only, never on the batch): a pool's key
// never changes once the pool is complete, so each step reads one row per pool instead of
// rebuilding every key from its tokens' rows. The token's own key is needed for nothing else (a
// complete pool is selected whole, through its tokens' latent rows, and the tail pool is never
// scored). Runs after every packed row of the batch is written: a pool may complete in the
// step that wrote its other tokens.
void StorePoolKeys(const KPoolDims& pd, const IndexerWeights& w, int64_t layer, int index_row,
                   const AttentionBatch& batch) {
  std::vector<int64_t> completing;  // [n] batch rows whose token ends a pool
  for (int64_t t = 0; t < batch.num_tokens(); ++t)
    if ((batch.positions[t] + 1) % pd.pool == 0) completing.push_back(t);
  threads::ParallelFor(static_cast<int64_t>(completing.size()), 1, [&](int64_t i0, int64_t i1) {
    std::vector<int32_t> pool_tokens(pd.pool);
    std::vector<float> rows(pd.pool * pd.packed());  // [pool, 2 d_i] the pool's stored rows
    std::vector<float> key(pd.head_dim);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = completing[i], last = batch.positions[t];
      const auto table = batch.BlockTable(batch.seq_slots[t]);
      for (int64_t j = 0; j < pd.pool; ++j)
        pool_tokens[j] = static_cast<int32_t>(last - pd.pool + 1 + j);
      batch.rows->GatherPositions(table, layer, index_row, pool_tokens, rows.data());
      ops::KPoolKeys(pd, rows.data(), 1, w.kpool_ape.data(), key.data());
      float* last_row = &rows[(pd.pool - 1) * pd.packed()];  // -> [pool key | its gate score]
      std::copy(key.begin(), key.end(), last_row);
      batch.rows->WriteRow(table, layer, index_row, last, last_row);
    }
  });
}

}  // namespace

void RunKPoolIndexer(const DsaDims& d, const IndexerWeights& w, int64_t layer, int index_row,
                     const AttentionBatch& batch, const float* x, int64_t hidden, const float* q_resid,
                     DsaSelection& selection) {
  const auto& k = kernels::BestKernels();
  const int64_t tokens = batch.num_tokens();
  const int64_t di = d.head_dim;
  ops::KPoolDims pd;
  pd.head_dim = di;
  pd.pool = d.kpool;
  pd.topk_pools = d.topk / d.kpool;
  LATENT_CHECK(q_resid != nullptr && pd.topk_pools > 0 && static_cast<int64_t>(w.kpool_ape.size()) == pd.pool * di);
  selection.assign(tokens, {});

  // Packed rows [T, 2 d_i]: LayerNorm(wk x) | kpool_gate x; cached.
  std::vector<float> keys(tokens * di), gates(tokens * di), packed(tokens * pd.packed());
  kernels::Linear(x, tokens, w.wk, keys.data());
  k.layer_norm(keys.data(), tokens, di, w.k_norm.data, w.k_norm_bias.data, w.k_norm.dtype, d.k_norm_eps,
               keys.data());
  kernels::Linear(x, tokens, w.kpool_gate, gates.data());
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy(&keys[t * di], &keys[(t + 1) * di], &packed[t * pd.packed()]);
    std::copy(&gates[t * di], &gates[(t + 1) * di], &packed[t * pd.packed() + di]);
    batch.rows->WriteRow(batch.BlockTable(batch.seq_slots[t]), layer, index_row, batch.positions[t],
                         &packed[t * pd.packed()]);
  }
  dump::Tensor("index_k", layer, packed.data(), tokens, pd.packed());
  StorePoolKeys(pd, w, layer, index_row, batch);
  // Queries [T, n_h, d_i] from the query latent (no rope); head weights [T, n_h] in f32.
  std::vector<float> queries(tokens * d.heads * di), head_weights(tokens * d.heads);
  kernels::Linear(q_resid, tokens, w.wq_b, queries.data());
  kernels::Linear(x, tokens, kernels::WeightRef{w.weights_proj.data(), DType::kF32, d.heads, hidden},
                  head_weights.data());
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(d.heads));
  for (float& v : head_weights) v *= head_scale;
  const float score_scale = 1.0f / std::sqrt(static_cast<float>(di));

  for (int64_t s = 0; s < batch.num_sequences(); ++s) {
    std::vector<int64_t> selecting;  // batch rows of this sequence with more pools than kept
    int64_t pools = 0;               // complete pools any of them sees
    for (int64_t t = batch.seq_starts[s]; t < batch.seq_starts[s + 1]; ++t) {
      const int64_t eligible = (batch.positions[t] + 1) / pd.pool;
      if (eligible <= pd.topk_pools) continue;
      selecting.push_back(t);
      pools = std::max(pools, eligible);
    }
    if (selecting.empty()) continue;
    // The pools' keys, read in place: the key halves of their last tokens' rows.
    std::vector<int32_t> last_tokens(pools);  // [pools] -> the position of its last token
    for (int64_t p = 0; p < pools; ++p)
      last_tokens[p] = static_cast<int32_t>((p + 1) * pd.pool - 1);
    AttendedRows pool_keys;
    pool_keys.Positions(*batch.rows, batch.BlockTable(s), layer, index_row, last_tokens);
    threads::ParallelFor(static_cast<int64_t>(selecting.size()), 1, [&](int64_t i0, int64_t i1) {
      std::vector<float> scores;
      std::vector<int32_t> order;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = selecting[i];
        const int64_t position = batch.positions[t];
        scores.resize((position + 1) / pd.pool);
        kernels::IndexScoreArgs args;
        args.q = &queries[t * d.heads * di];
        args.w = &head_weights[t * d.heads];
        args.heads = d.heads;
        args.dim = di;
        args.scale = score_scale;
        args.keys = pool_keys.data();
        args.rows = pool_keys.format();  // the first d_i values of each row: its pool's key
        args.n = static_cast<int64_t>(scores.size());
        args.scores = scores.data();
        k.index_scores(args);
        ops::KPoolSelect(pd, scores, position, order, selection[t]);
      }
    });
  }
}

}  // namespace latent::ops
