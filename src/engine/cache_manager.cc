#include "engine/cache_manager.h"

#include <algorithm>
#include <climits>

#include "base/error.h"

namespace latent::engine {
namespace {

// The view's dtype: an fp8 cache's rows say their own encoding (cache/paged_rows.h).
DType ElementType(model::CacheDType dtype) {
  switch (dtype) {
    case model::CacheDType::kF32: return DType::kF32;
    case model::CacheDType::kBF16: return DType::kBF16;
    case model::CacheDType::kFP8: return DType::kF8E4M3;
  }
  FailInternal("unknown cache dtype");
}

}  // namespace

int32_t CacheManager::BlocksToHold(const model::ModelConfig& config, const CacheOptions& options,
                                   int64_t tokens) {
  const uint32_t b = options.block_tokens;
  if (b == 0) Fail("--block-tokens must be positive");
  const cache::GroupedLayout groups = cache::GroupedLayout::Build(model::CacheRows(config, options.dtype), b);
  int64_t blocks = (tokens + b - 1) / b;
  if (groups.has_window) blocks += (tokens + groups.window_block_tokens - 1) / groups.window_block_tokens;
  return static_cast<int32_t>(std::max<int64_t>(blocks, 1));
}

CacheManager::CacheManager(const model::ModelConfig& config, const CacheOptions& options)
    : block_tokens_(options.block_tokens), dtype_(options.dtype) {
  if (block_tokens_ == 0) Fail("--block-tokens must be positive");
  const DType element = ElementType(dtype_);
  cache::ModelCacheRows rows = model::CacheRows(config, dtype_);
  bytes_per_token_ = cache::BytesPerToken(rows);
  for (const auto& layer : rows) {
    layer_bytes_per_token_ = std::max(layer_bytes_per_token_, cache::BytesPerToken({layer}));
  }
  const cache::GroupedLayout groups = cache::GroupedLayout::Build(rows, block_tokens_);
  for (const auto& layer : rows) {
    for (const auto& row : layer) {
      if (row.retention == cache::Retention::kWindow) window_tokens_ = std::max(window_tokens_, row.window_tokens);
    }
  }
  window_block_tokens_ = groups.window_block_tokens;
  bytes_per_sequence_ = cache::BytesPerSequence(rows);
  int32_t slots = 0;
  if (bytes_per_sequence_ > 0) {
    if (options.state_slots <= 0) Fail("the per-sequence state needs at least one slot");
    slots = options.state_slots;
  }
  int32_t num_blocks = options.num_blocks;
  if (num_blocks <= 0) {
    double bytes = options.memory_gib * (1ull << 30);
    if (!(bytes > 0)) Fail("--cache-memory must be positive");
    if (slots > 0) {
      // State first, at most half of the budget; the blocks take the rest.
      const double fit = bytes / 2 / static_cast<double>(bytes_per_sequence_);
      if (fit < 1) {
        Fail("--cache-memory ", options.memory_gib, " GiB cannot hold one sequence's state (",
             bytes_per_sequence_, " bytes) in half of it");
      }
      if (fit < slots) slots = static_cast<int32_t>(fit);
      bytes -= static_cast<double>(slots) * static_cast<double>(bytes_per_sequence_);
    }
    // Clamped: a double past 2^64 (--cache-memory 2e10 GiB) converts to anything, often 0.
    const uint64_t whole_bytes = bytes >= 0x1p64 ? UINT64_MAX : static_cast<uint64_t>(bytes);
    const uint64_t window_blocks = whole_bytes / groups.block_bytes;
    num_blocks = groups.has_window
                     ? static_cast<int32_t>(std::min<uint64_t>(INT32_MAX, window_blocks))
                     : cache::CacheStorage::BlocksForBytes(rows, block_tokens_, whole_bytes);
    if (num_blocks == 0) Fail("--cache-memory ", options.memory_gib, " GiB holds no cache block");
  }
  // Prefix caching is refused on models with per-sequence state: a hit would need the state at
  // the end of the hit, which no block holds (a snapshot per block boundary is future work).
  const bool prefix_caching = options.prefix_caching && slots == 0;
  if (groups.has_window) {
    storage_ = std::make_unique<cache::CacheStorage>(rows, groups, num_blocks);
  } else {
    storage_ = std::make_unique<cache::CacheStorage>(rows, block_tokens_, num_blocks);
  }
  pool_ = std::make_unique<cache::BlockPool>(num_blocks, prefix_caching);
  rows_ = storage_->View(element);
  if (slots > 0) {
    state_storage_ = std::make_unique<cache::StateStorage>(rows, slots);
    slot_pool_ = std::make_unique<cache::SlotPool>(slots);
    rows_.states = state_storage_->view();
  }
}

}  // namespace latent::engine
