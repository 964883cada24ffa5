// A small open-addressing hash map from 64-bit keys to values, for the BPE hot path (merge ranks
// by id pair, ids by code point): one probe sequence in one array, where std::unordered_map
// chases a node pointer per lookup. Insert-only; built once at load.
#pragma once

#include <cstdint>
#include <vector>

namespace latent::tokenizer {

template <typename V>
class FlatU64Map {
 public:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // never a real key

  void Reserve(size_t n) {
    size_t capacity = 16;
    while (capacity < 2 * n) capacity *= 2;  // load factor <= 1/2 keeps probes short
    Rehash(capacity);
  }

  // Inserts or overwrites.
  void Set(uint64_t key, const V& value) {
    if (2 * (size_ + 1) > slots_.size()) Rehash(slots_.empty() ? 16 : 2 * slots_.size());
    Slot& slot = slots_[Probe(key)];
    if (slot.key == kEmpty) ++size_;
    slot.key = key;
    slot.value = value;
  }

  const V* Find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    const Slot& slot = slots_[Probe(key)];
    return slot.key == kEmpty ? nullptr : &slot.value;
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    V value{};
  };

  // The slot holding `key`, or the empty slot where it would go.
  size_t Probe(uint64_t key) const {
    const size_t mask = slots_.size() - 1;
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    size_t i = static_cast<size_t>(h ^ (h >> 29)) & mask;
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask;
    return i;
  }

  void Rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != kEmpty) Set(s.key, s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace latent::tokenizer
