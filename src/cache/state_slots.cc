#include "cache/state_slots.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace latent::cache {
namespace {

uint64_t AlignUp(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }

}  // namespace

uint64_t BytesPerSequence(const ModelCacheRows& rows) {
  uint64_t offset = 0;
  for (const auto& layer : rows) {
    for (const auto& row : layer) {
      if (row.retention != Retention::kPerSequence) continue;
      offset = AlignUp(offset, std::max<uint64_t>(row.align, alignof(float))) + row.bytes_per_sequence;
    }
  }
  return AlignUp(offset, 64);
}

float* StateSlots::At(StateSlot slot, int64_t layer, int row) const {
  LATENT_CHECK(base != nullptr && slot >= 0 && slot < num_slots);
  const int64_t i = layer * rows_per_layer + row;
  LATENT_CHECK(i >= 0 && i < static_cast<int64_t>(bytes.size()) && bytes[i] > 0);
  return reinterpret_cast<float*>(base + static_cast<uint64_t>(slot) * slot_bytes + offset[i]);
}

void StateSlots::CopySlot(StateSlot from, StateSlot to) const {
  LATENT_CHECK(base != nullptr && from >= 0 && from < num_slots && to >= 0 && to < num_slots);
  if (from == to) return;
  std::memcpy(base + static_cast<uint64_t>(to) * slot_bytes,
              base + static_cast<uint64_t>(from) * slot_bytes, slot_bytes);
}

StateStorage::StateStorage(const ModelCacheRows& rows, int32_t num_slots) {
  StateSlots& v = view_;
  for (const auto& layer : rows) v.rows_per_layer = std::max(v.rows_per_layer, static_cast<int32_t>(layer.size()));
  v.offset.assign(rows.size() * v.rows_per_layer, 0);
  v.bytes.assign(rows.size() * v.rows_per_layer, 0);
  uint64_t offset = 0;
  for (size_t l = 0; l < rows.size(); ++l) {
    for (size_t r = 0; r < rows[l].size(); ++r) {
      const CacheRowSpec& row = rows[l][r];
      if (row.retention != Retention::kPerSequence) continue;
      if (row.bytes_per_sequence == 0) Fail("state row '", row.name, "' of layer ", l, " has no bytes");
      offset = AlignUp(offset, std::max<uint64_t>(row.align, alignof(float)));
      v.offset[l * v.rows_per_layer + r] = offset;
      v.bytes[l * v.rows_per_layer + r] = row.bytes_per_sequence;
      offset += row.bytes_per_sequence;
    }
  }
  v.slot_bytes = AlignUp(offset, 64);
  if (v.slot_bytes == 0) return;  // No state: an empty view.
  if (num_slots <= 0) Fail("the state cache needs at least one sequence slot, got ", num_slots);
  v.num_slots = num_slots;
  data_.reset(static_cast<uint8_t*>(std::calloc(total_bytes(), 1)));
  if (!data_) Fail("cannot allocate ", total_bytes(), " bytes of per-sequence state");
  v.base = data_.get();
}

void StateStorage::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

SlotPool::SlotPool(int32_t num_slots) : used_(std::max(num_slots, 0), false) {}

std::optional<StateSlot> SlotPool::Acquire() {
  for (size_t s = 0; s < used_.size(); ++s) {
    if (used_[s]) continue;
    used_[s] = true;
    ++num_used_;
    return static_cast<StateSlot>(s);
  }
  return std::nullopt;
}

void SlotPool::Release(StateSlot slot) {
  LATENT_CHECK(slot >= 0 && static_cast<size_t>(slot) < used_.size() && used_[slot]);
  used_[slot] = false;
  --num_used_;
}

}  // namespace latent::cache
