// Per-sequence state (Retention::kPerSequence rows: a linear-attention layer's recurrent state and
// its short-convolution window), stored next to the paged rows: one fixed-size slot per running
// sequence instead of one row per token. A slot holds every kPerSequence row of every layer, laid
// out by StateLayout; a sequence takes a slot from the SlotPool when the scheduler admits it and
// gives it back when it is preempted or ends. Like the block pool, the pool knows ids only; the
// bytes are StateStorage's, read and written in place through the StateSlots view.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "cache/cache_row_spec.h"

namespace latent::cache {

using StateSlot = int32_t;

// The plain view of the state slots: row r of layer l of slot s starts at
// base + s * slot_bytes + offset[l * rows_per_layer + r]. State is always f32, whatever the
// paged rows' dtype: a recurrent state rounded every step would drift.
struct StateSlots {
  uint8_t* base = nullptr;  // null: the model declares no per-sequence state
  uint64_t slot_bytes = 0;
  int32_t num_slots = 0;
  int32_t rows_per_layer = 0;
  std::vector<uint64_t> offset;  // [layers, rows_per_layer] byte offset in a slot
  std::vector<uint64_t> bytes;   // [layers, rows_per_layer] bytes of the row; 0: not a state row

  bool empty() const { return base == nullptr; }
  // The f32 state (layer, row) of `slot`; fails on a slot out of range or a row with no state.
  float* At(StateSlot slot, int64_t layer, int row) const;
  // Copies every state row of slot `from` into slot `to` (forking a sequence).
  void CopySlot(StateSlot from, StateSlot to) const;
};

// The bytes of `num_slots` slots, zeroed.
class StateStorage {
 public:
  StateStorage(const ModelCacheRows& rows, int32_t num_slots);
  const StateSlots& view() const { return view_; }
  uint64_t total_bytes() const { return view_.slot_bytes * static_cast<uint64_t>(view_.num_slots); }

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, FreeDeleter> data_;
  StateSlots view_;
};

// Which slots are free. Acquire hands out the lowest free slot (deterministic).
class SlotPool {
 public:
  explicit SlotPool(int32_t num_slots);
  int32_t num_slots() const { return static_cast<int32_t>(used_.size()); }
  int32_t NumUsed() const { return num_used_; }
  std::optional<StateSlot> Acquire();
  void Release(StateSlot slot);

 private:
  std::vector<bool> used_;
  int32_t num_used_ = 0;
};

}  // namespace latent::cache
