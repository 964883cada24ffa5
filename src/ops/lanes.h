// ForEachInLanes: a parallel loop whose items use per-thread memory ("lanes") of a workspace
// (ops/attention_workspace.h's lanes for attention, ops/moe.h's for experts).
//
// Items are handed out one at a time (as ParallelFor with grain 1 does) to min(n, NumThreads())
// lanes: a lane is run by one thread at a time, so the lane's memory needs no lock. Calls made by
// an item that use the thread pool themselves (a Linear) run on the item's thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "threads/thread_pool.h"

namespace latent::ops {

// Runs fn(lane, i) for every i in [0, n), each once. `workspace.Reserve(lanes)` makes the lanes
// (on the calling thread, before the loop). An item's result must not depend on its lane (each
// lane's memory is scratch).
template <class Workspace, class F>
void ForEachInLanes(Workspace& workspace, int64_t n, F&& fn) {
  if (n <= 0) return;
  const int64_t lanes = std::min<int64_t>(n, threads::NumThreads());
  workspace.Reserve(lanes);
  std::atomic<int64_t> next{0};
  threads::ParallelFor(lanes, 1, [&](int64_t l0, int64_t l1) {
    for (int64_t lane = l0; lane < l1; ++lane) {
      for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
           i = next.fetch_add(1, std::memory_order_relaxed)) {
        fn(lane, i);
      }
    }
  });
}

}  // namespace latent::ops
