#include "ops/dsa_indexer.h"

#include <algorithm>
#include <cmath>

#include "base/dump.h"
#include "base/error.h"
#include "base/order_key.h"
#include "kernels/kernel_table.h"
#include "kernels/linear.h"
#include "ops/attended_rows.h"
#include "ops/attention_workspace.h"
#include "ops/kpool_indexer.h"
#include "ops/position_scale.h"
#include "threads/thread_pool.h"

namespace latent::ops {
namespace {

constexpr float kQueryNormEps = 1e-6f;  // mistral_large4's query LayerNorm.

using kernels::Linear;

// Positions per parallel chunk when one token's positions are split across the threads: each
// chunk transposes the query once (heads x head_dim) before scoring its keys.
constexpr int64_t kScoreChunk = 2048;

// One token's indexer query: q [heads, head_dim] (rotated), w [heads] (already / sqrt(heads)).
struct IndexQuery {
  const float* q;
  const float* w;
  int64_t heads, head_dim;
  float scale;          // 1 / sqrt(head_dim)
  bool bf16_products;   // bf16 compute: the query projection rounds its inputs to bf16
};

// scores[j] = sum_h w[h] * relu(scale * q[h] . k[j]) for j in [j0, j1), keys read in place; a
// key's score does not depend on j0, j1 or the thread (kernels/index_scores.h).
void ScoreKeys(const IndexQuery& query, const AttendedRows& keys, int64_t j0, int64_t j1,
               float* scores) {
  kernels::IndexScoreArgs args;
  args.q = query.q;
  args.w = query.w;
  args.heads = query.heads;
  args.dim = query.head_dim;
  args.scale = query.scale;
  args.rows = keys.format();
  args.keys = keys.data() + j0;
  args.n = j1 - j0;
  args.scores = scores + j0;
  args.bf16_products = query.bf16_products;
  kernels::BestKernels().index_scores(args);
}

}  // namespace

// The positions whose OrderKey (unique per position) is at most the topk-th smallest key, found
// by nth_element over the keys and then a scan in position order, with no sort.
void SelectTopK(const std::vector<float>& scores, int64_t topk, std::vector<uint64_t>& keys,
                std::vector<int32_t>& chosen) {
  const int64_t n = static_cast<int64_t>(scores.size());
  LATENT_CHECK(topk > 0 && topk < n);
  keys.resize(n);
  for (int64_t j = 0; j < n; ++j) keys[j] = OrderKey(scores[j], static_cast<int32_t>(j));
  std::nth_element(keys.begin(), keys.begin() + (topk - 1), keys.end());
  const uint64_t last = keys[topk - 1];
  chosen.clear();
  chosen.reserve(topk);
  for (int64_t j = 0; j < n; ++j) {
    const auto position = static_cast<int32_t>(j);
    if (OrderKey(scores[j], position) <= last) chosen.push_back(position);
  }
}

void RunDsaIndexer(const DsaDims& d, const IndexerWeights& w, const ops::Rope* rope,
                   int64_t layer, int index_row, const AttentionBatch& batch, const float* x,
                   int64_t hidden, const float* q_resid, int64_t q_lora, DsaSelection& selection,
                   AttentionWorkspace* workspace) {
  if (d.kpool > 0) {
    RunKPoolIndexer(d, w, layer, index_row, batch, x, hidden, q_resid, selection);
    return;
  }
  const auto& k = kernels::BestKernels();
  const int64_t tokens = batch.num_tokens();
  selection.assign(tokens, {});
  AttentionWorkspace own_workspace;  // for a call without one: allocated as it is used
  AttentionWorkspace& ws = workspace != nullptr ? *workspace : own_workspace;
  ws.Reserve(1);

  // Keys [T, d_i]: LayerNorm(wk x), first dr dims rotated; cached.
  std::vector<float> keys(tokens * d.head_dim);
  Linear(x, tokens, w.wk, keys.data());
  k.layer_norm(keys.data(), tokens, d.head_dim, w.k_norm.data, w.k_norm_bias.data, w.k_norm.dtype,
               d.k_norm_eps, keys.data());
  // Queries [T, n_h, d_i] from the query latent, or from LayerNorm(x).
  std::vector<float> queries(tokens * d.heads * d.head_dim);
  if (w.q_norm.data != nullptr) {
    std::vector<float> normed(tokens * hidden);  // [T, D]
    k.layer_norm(x, tokens, hidden, w.q_norm.data, w.q_norm_bias.data, w.q_norm.dtype,
                 kQueryNormEps, normed.data());
    Linear(normed.data(), tokens, w.wq_b, queries.data());
  } else {
    LATENT_CHECK(q_resid != nullptr);
    (void)q_lora;
    Linear(q_resid, tokens, w.wq_b, queries.data());
  }
  if (!w.query_scale.empty()) {
    const std::vector<float> factors = w.query_scale.Factors(batch.positions);  // [T, n_h]
    ops::ScaleHeads(queries.data(), tokens, d.heads, d.head_dim, factors.data());
  }
  const int64_t half = rope != nullptr ? rope->dim / 2 : 0;
  // Where the rotated dims start in a query or key head.
  const int64_t at = rope != nullptr && d.rope_last ? d.head_dim - rope->dim : 0;
  std::vector<float> cos(half), sin(half);
  for (int64_t t = 0; t < tokens; ++t) {
    if (rope != nullptr) {
      rope->CosSin(batch.positions[t], cos.data(), sin.data());
      rope->Apply(&keys[t * d.head_dim + at], cos.data(), sin.data());
      for (int64_t h = 0; h < d.heads; ++h)
        rope->Apply(&queries[(t * d.heads + h) * d.head_dim + at], cos.data(), sin.data());
    }
    batch.rows->WriteRow(batch.RowTable(batch.seq_slots[t], layer, index_row), layer, index_row, batch.positions[t],
                         &keys[t * d.head_dim]);
  }
  dump::Tensor("index_k", layer, keys.data(), tokens, d.head_dim);
  // Head weights [T, n_h] in f32.
  std::vector<float> head_weights(tokens * d.heads);
  Linear(x, tokens, kernels::WeightRef{w.weights_proj.data(), DType::kF32, d.heads, hidden}, head_weights.data());
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(d.heads));
  for (float& v : head_weights) v *= head_scale;
  const float score_scale = 1.0f / std::sqrt(static_cast<float>(d.head_dim));

  // Per sequence: score its cached keys (read in place) for each of its tokens that selects.
  for (int64_t slot = 0; slot < batch.num_sequences(); ++slot) {
    const int64_t length = batch.context_lens[slot];
    if (length <= d.topk) continue;  // Every token of this sequence attends densely.
    AttendedRows& cached_keys = ws.index_keys;  // [length] -> the index key of each position
    cached_keys.Range(*batch.rows, batch.RowTable(slot, layer, index_row), layer, index_row, 0,
                      length);
    std::vector<int64_t> selecting;  // batch rows of this sequence that select
    for (int64_t t = batch.seq_starts[slot]; t < batch.seq_starts[slot + 1]; ++t) {
      if (batch.positions[t] + 1 > d.topk) selecting.push_back(t);
    }
    // Many tokens (a prefill chunk): one token per thread. Few (decodes): each token's
    // positions split across the threads. Every score is computed the same way either way.
    const bool per_token = static_cast<int64_t>(selecting.size()) >= 2 * threads::NumThreads();
    auto select = [&](int64_t lane, int64_t i, bool split_positions) {
      std::vector<float>& scores = ws.Lane(lane).scores;
      std::vector<uint64_t>& keys = ws.Lane(lane).keys;
      const int64_t t = selecting[i];
      const int64_t visible = batch.positions[t] + 1;
      scores.resize(visible);
      const IndexQuery query{&queries[t * d.heads * d.head_dim], &head_weights[t * d.heads],
                             d.heads, d.head_dim, score_scale, w.wq_b.bf16_activations};
      if (split_positions) {
        float* out = scores.data();
        threads::ParallelFor(visible, kScoreChunk, [&](int64_t j0, int64_t j1) {
          ScoreKeys(query, cached_keys, j0, j1, out);
        });
      } else {
        ScoreKeys(query, cached_keys, 0, visible, scores.data());
      }
      SelectTopK(scores, d.topk, keys, selection[t]);
    };
    if (per_token) {
      ForEachInLanes(ws, static_cast<int64_t>(selecting.size()), [&](int64_t lane, int64_t i) {
        select(lane, i, /*split_positions=*/false);
      });
    } else {
      for (int64_t i = 0; i < static_cast<int64_t>(selecting.size()); ++i) {
        select(/*lane=*/0, i, /*split_positions=*/true);
      }
    }
  }
}

}  // namespace latent::ops
