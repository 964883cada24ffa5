#include "engine/cache_manager.h"

#include "base/error.h"

namespace latent::engine {
namespace {

DType ElementType(model::CacheDType dtype) {
  switch (dtype) {
    case model::CacheDType::kF32: return DType::kF32;
    case model::CacheDType::kBF16: return DType::kBF16;
    case model::CacheDType::kFP8: break;
  }
  Fail("the engine caches latent rows in f32 or bf16; ", model::CacheDTypeName(dtype),
       " rows are not supported yet");
}

}  // namespace

CacheManager::CacheManager(const model::ModelConfig& config, const CacheOptions& options)
    : block_tokens_(options.block_tokens), dtype_(options.dtype) {
  if (block_tokens_ == 0) Fail("--block-tokens must be positive");
  const DType element = ElementType(dtype_);
  cache::ModelCacheRows rows = model::CacheRows(config, dtype_);
  bytes_per_token_ = cache::BytesPerToken(rows);
  int32_t num_blocks = options.num_blocks;
  if (num_blocks <= 0) {
    const double bytes = options.memory_gib * (1ull << 30);
    if (!(bytes > 0)) Fail("--cache-memory must be positive");
    num_blocks = cache::CacheStorage::BlocksForBytes(rows, block_tokens_, static_cast<uint64_t>(bytes));
    if (num_blocks == 0) Fail("--cache-memory ", options.memory_gib, " GiB holds no cache block");
  }
  storage_ = std::make_unique<cache::CacheStorage>(std::move(rows), block_tokens_, num_blocks);
  pool_ = std::make_unique<cache::BlockPool>(num_blocks, options.prefix_caching);
  rows_ = storage_->View(element);
}

}  // namespace latent::engine
