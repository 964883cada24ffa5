// The parts of attention_queries that the f32 kernel (attention_avx512.cc), the vdpbf16ps one
// (attention_queries_bf16.cc) and the AMX one (amx/attention_queries_amx.cc) share: the task
// split and each query's last step. Include it after avx512_common.h, inside the including
// file's target pragma: its functions have internal linkage, each target region its own copy.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "threads/thread_pool.h"

namespace latent::kernels::avx512 {
namespace {

// Queries per task: they share each block of keys and values from L1/L2.
inline constexpr int64_t kQueriesPerTask = 64;
static_assert(kQueriesBlockPositions % kSoftmaxBlock == 0);  // the blocks of every kernel here

// Runs head_queries(head, i0, i1) for every head and tile of at most kQueriesPerTask queries, on
// the thread pool, later tiles first: they attend more positions, and the pool hands tasks out
// dynamically. A query's result never depends on the split.
template <class F>
void ForEachHeadTile(const QueriesAttentionArgs& qa, F&& head_queries) {
  const int64_t heads = qa.shared.num_heads;
  const int64_t tiles = (qa.num_queries + kQueriesPerTask - 1) / kQueriesPerTask;
  threads::ParallelFor(heads * tiles, 1, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t tile = tiles - 1 - j / heads, head = j % heads;
      head_queries(head, tile * kQueriesPerTask,
                   std::min(qa.num_queries, (tile + 1) * kQueriesPerTask));
    }
  });
}

// A task's queries [i0, i1) (at most kQueriesPerTask) as their blocks go by: each one's running
// max, sum and unnormalised output (o: the thread's buffer of kQueriesPerTask rows of v_dim
// floats, one after the other: the AMX kernel reads 16 of them as one tile).
struct QueryTileState {
  float mx[kQueriesPerTask], sum[kQueriesPerTask];
  float* o[kQueriesPerTask];
  int64_t longest = 0;  // the longest query's length: blocks past it are skipped
  // The first block any query attends (FirstAttendedBlock): those before it are skipped (a
  // sliding window's queries attend only their last positions).
  int64_t first_block = 0;

  QueryTileState(const QueriesAttentionArgs& qa, int64_t i0, int64_t i1) {
    const int64_t dv = qa.shared.v_dim;
    thread_local std::vector<float> rows;  // [kQueriesPerTask, dv]
    if (static_cast<int64_t>(rows.size()) < kQueriesPerTask * dv) rows.resize(kQueriesPerTask * dv);
    for (int64_t i = i0; i < i1; ++i) {
      mx[i - i0] = -INFINITY;
      sum[i - i0] = 0.0f;
      o[i - i0] = rows.data() + (i - i0) * dv;
      std::fill(o[i - i0], o[i - i0] + dv, 0.0f);
      longest = std::max(longest, qa.lengths[i]);
    }
    first_block = FirstAttendedBlock(qa, i0, i1, kSoftmaxBlock);
  }

  // Calls tile(block, j, count) for every block of kSoftmaxBlock positions from the earliest
  // start up to `longest` and every register tile of `per_tile` queries from j (count of them)
  // among `queries`.
  template <class F>
  void ForEachBlockAndTile(int64_t queries, int per_tile, F&& tile) const {
    for (int64_t b = first_block; b * kSoftmaxBlock < longest; ++b) {
      for (int64_t j = 0; j < queries; j += per_tile) {
        tile(b, j, static_cast<int>(std::min<int64_t>(per_tile, queries - j)));
      }
    }
  }
};

// Queries [i0, i1) of `head`: out = o / the softmax denominator (from the running max and sum),
// or 0 for a query that attends nothing. o[i - i0]: the query's unnormalised output [v_dim].
inline void WriteQueryOutputs(const QueriesAttentionArgs& qa, int64_t head, int64_t i0,
                              int64_t i1, float* const* o, const float* mx, const float* sum) {
  const AttentionArgs& a = qa.shared;
  const int64_t dv = a.v_dim;
  for (int64_t i = i0; i < i1; ++i) {
    float* out = qa.out + (i * a.num_heads + head) * dv;
    if (qa.lengths[i] <= QueryStart(qa, i)) {
      std::fill(out, out + dv, 0.0f);
      continue;
    }
    std::copy(o[i - i0], o[i - i0] + dv, out);
    DivideRow(out, dv, SinkDenominator(a.sinks, head, mx[i - i0], sum[i - i0]));
  }
}

}  // namespace
}  // namespace latent::kernels::avx512
