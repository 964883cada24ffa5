// The BPE word cache: text repeats words, so the ids of a piece are remembered. A shared map in
// locked shards holds up to 128Ki words; in front of it, short words also go to a small per-thread
// direct-mapped table (one 64-byte line per word, no lock, a collision replaces the line), which
// answers most lookups without touching the shared map.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace latent::tokenizer {

class WordCache {
 public:
  WordCache();
  WordCache(const WordCache&) = delete;
  WordCache& operator=(const WordCache&) = delete;

  // Words of this many bytes or more are not cached (HF's limit too).
  static constexpr size_t kMaxWordBytes = 256;

  // Appends the cached ids of `word` and returns true, or returns false.
  bool Lookup(std::string_view word, std::vector<int32_t>& out) const;
  void Insert(std::string_view word, std::span<const int32_t> ids) const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 8192;  // per shard: 128Ki words in all
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
  };

  const uint64_t owner_;  // tells this cache's per-thread lines from other tokenizers'
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace latent::tokenizer
