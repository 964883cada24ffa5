#include "tokenizer/word_cache.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

namespace latent::tokenizer {

namespace {

// One cached short word: its hash, bytes and ids in one cache line.
struct Line {
  uint64_t hash;  // 0: empty
  uint8_t length;
  uint8_t count;
  char bytes[22];
  int32_t ids[8];
};
static_assert(sizeof(Line) == 64);

constexpr size_t kLines = 8192;  // 512 KiB per tokenizer and thread
constexpr size_t kSlots = 4;     // tokenizers a thread keeps lines for at once

struct Slot {
  uint64_t owner = 0;
  uint64_t last_use = 0;
  std::unique_ptr<Line[]> lines;
};

// The calling thread's lines for cache `owner`; the least recently used slot is recycled, so a
// thread that meets many tokenizers (tests, fuzzers) stays at kSlots tables.
Line* ThreadLines(uint64_t owner) {
  thread_local std::array<Slot, kSlots> slots;
  thread_local uint64_t clock = 0;
  ++clock;
  Slot* victim = &slots[0];
  for (Slot& slot : slots) {
    if (slot.owner == owner) {
      slot.last_use = clock;
      return slot.lines.get();
    }
    if (slot.last_use < victim->last_use) victim = &slot;
  }
  if (!victim->lines) victim->lines = std::make_unique<Line[]>(kLines);
  std::memset(static_cast<void*>(victim->lines.get()), 0, kLines * sizeof(Line));
  victim->owner = owner;
  victim->last_use = clock;
  return victim->lines.get();
}

void Fill(Line& line, uint64_t h, std::string_view word, std::span<const int32_t> ids) {
  if (ids.size() > std::size(line.ids)) return;  // rare: a short word of many tokens
  line.hash = h;
  line.length = static_cast<uint8_t>(word.size());
  line.count = static_cast<uint8_t>(ids.size());
  std::memcpy(line.bytes, word.data(), word.size());
  std::copy(ids.begin(), ids.end(), line.ids);
}

uint64_t Hash(std::string_view word) { return std::hash<std::string_view>{}(word) | 1; }

std::atomic<uint64_t> next_owner{1};

}  // namespace

WordCache::WordCache() : owner_(next_owner.fetch_add(1)) {}

bool WordCache::Lookup(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() >= kMaxWordBytes) return false;
  const uint64_t h = Hash(word);
  Line* line = nullptr;
  if (word.size() <= sizeof(Line::bytes)) {
    line = &ThreadLines(owner_)[h % kLines];
    if (line->hash == h && line->length == word.size() &&
        std::memcmp(line->bytes, word.data(), word.size()) == 0) {
      out.insert(out.end(), line->ids, line->ids + line->count);
      return true;
    }
  }
  Shard& shard = shards_[h % kShards];
  std::lock_guard<std::mutex> lock(shard.mutex);
  auto it = shard.words.find(word);
  if (it == shard.words.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  if (line != nullptr) Fill(*line, h, word, it->second);
  return true;
}

void WordCache::Insert(std::string_view word, std::span<const int32_t> ids) const {
  if (word.size() >= kMaxWordBytes) return;
  const uint64_t h = Hash(word);
  if (word.size() <= sizeof(Line::bytes)) Fill(ThreadLines(owner_)[h % kLines], h, word, ids);
  Shard& shard = shards_[h % kShards];
  std::lock_guard<std::mutex> lock(shard.mutex);
  if (shard.words.size() >= kShardCapacity) shard.words.clear();
  shard.words.emplace(std::string(word), std::vector<int32_t>(ids.begin(), ids.end()));
}

}  // namespace latent::tokenizer
