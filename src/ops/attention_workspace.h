// AttentionWorkspace: the memory the attention blocks (ops/mla_attention.h, ops/dsa_indexer.h)
// reuse from step to step: the rows a sequence's attention reads (AttendedRows, whose f32 gather
// buffer grows to the longest context read) and the DSA indexer's per-token scores. It belongs to
// its owner (a model's forward workspace; one forward at a time), not to the threads, so its
// memory goes with the model, and a step allocates none of it once the longest context was seen.
//
// Parallel loops hand their items to lanes (ForEachInLanes): a lane is run by one thread at a
// time, so the lane's memory needs no lock, and there are at most NumThreads() lanes. Code on the
// calling thread outside such a loop uses lane 0.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/scratch.h"
#include "ops/attended_rows.h"
#include "ops/lanes.h"  // ForEachInLanes over an AttentionWorkspace
#include "threads/thread_pool.h"

namespace latent::ops {

// One lane's memory.
struct AttentionLane {
  AttendedRows rows;            // the rows one sequence's attention reads
  std::vector<float> scores;    // [visible] one token's indexer scores
  std::vector<uint64_t> keys;   // [visible] their OrderKeys, for the top-k
  // An absorbed run's selected positions: their union, ascending, and each position's index in
  // it ([context], -1 where not selected); one token's visible rows and attention scores.
  std::vector<int32_t> wanted, index_of;
  std::vector<const void*> visible;
  std::vector<float> attention_scores;
};

class AttentionWorkspace {
 public:
  // Makes `n` lanes (at least); on the calling thread, before a loop uses them.
  void Reserve(int64_t n) {
    while (static_cast<int64_t>(lanes_.size()) < n) lanes_.push_back(std::make_unique<AttentionLane>());
  }
  int64_t lanes() const { return static_cast<int64_t>(lanes_.size()); }
  AttentionLane& Lane(int64_t i) { return *lanes_[i]; }
  // The indexer's cached keys of the sequence it scores, read by every lane.
  AttendedRows index_keys;
  // The expanded form's buffers for one sequence (on the calling thread), grown to the longest.
  struct Expanded {
    Scratch<float> latents;   // [n, C] the rows' latents
    Scratch<float> kv;        // [n, H, dn + dv] kv_b_proj of them
    Scratch<float> rope;      // [n, dr] the rows' rotary keys (shared by the heads)
    Scratch<float> keys;      // [n, H, dn + dr] whole expanded keys (DSA-selected tokens only)
    Scratch<float> q_rows;    // [nq, H, dn + dr] the causal queries
    Scratch<float> out_rows;  // [nq, H, dv] their outputs
  };
  Expanded expanded;
  // The layer's step-sized buffers (ops/mla_attention.cc), grown to the largest step: fresh
  // vectors of these sizes (tens of megabytes at 64 tokens of 128 heads) were mapped,
  // page-faulted and zeroed again at every layer of every step.
  struct Step {
    Scratch<float> q;        // [T, H, dn + dr] the queries
    Scratch<float> attn;     // [T, H, dv] the heads' outputs
    Scratch<float> q_cat;    // [n, H, C + dr] an absorbed group's folded queries
    Scratch<float> out_lat;  // [n, H, C] their latent outputs
  };
  Step step;

 private:
  std::vector<std::unique_ptr<AttentionLane>> lanes_;  // stable addresses as lanes are added
};

}  // namespace latent::ops
