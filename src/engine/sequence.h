// The engine's state of one sample of one request.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/block_table.h"
#include "engine/request.h"

namespace latent::engine {

enum class SequenceStatus : uint8_t { kWaiting, kRunning, kFinished };

struct Sequence {
  // `table`: empty, from the engine's CacheManager (NewTable), which holds the block size.
  Sequence(int64_t id, cache::BlockTable table) : id(id), table(std::move(table)) {}
  Sequence(int64_t id, uint32_t block_tokens) : id(id), table(block_tokens) {}

  int64_t id;               // Unique; also the arrival order (a preempted sequence keeps it).
  int64_t request_id = 0;
  int32_t sample = 0;       // Index among the request's n samples.
  const Request* request = nullptr;  // Owned by the engine, alive while any sample runs.
  uint64_t seed = 0;        // This sample's generator seed.
  std::vector<int32_t> tokens;  // Prompt, then generated tokens.
  int64_t num_prompt = 0;
  int64_t num_computed = 0;     // Tokens whose rows are in the cache.
  int64_t prefix_hit_tokens = -1;  // Prompt tokens found in the prefix cache when first scheduled.
  cache::BlockTable table;
  SequenceStatus status = SequenceStatus::kWaiting;

  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - num_prompt; }
  int64_t num_pending() const { return static_cast<int64_t>(tokens.size()) - num_computed; }
  bool is_prefill() const { return num_pending() > 1 || num_computed < num_prompt; }
};

}  // namespace latent::engine
