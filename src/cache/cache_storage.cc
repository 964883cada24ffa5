#include "cache/cache_storage.h"

#include <cstdlib>

#include "base/error.h"

namespace latent::cache {

CacheStorage::CacheStorage(ModelCacheRows rows, uint32_t block_tokens, int32_t num_blocks)
    : rows_(std::move(rows)), layout_(CacheLayout::Build(rows_, block_tokens)), num_blocks_(num_blocks) {
  if (num_blocks <= 0) Fail("the cache needs at least one block, got ", num_blocks);
  // calloc: zeroed (a bug reading an unwritten row sees zeros, not garbage) yet lazily, page by
  // page, so a large cache costs nothing until used.
  data_.reset(static_cast<uint8_t*>(std::calloc(total_bytes(), 1)));
  if (!data_) Fail("cannot allocate ", total_bytes(), " bytes of cache");
}

void CacheStorage::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

int32_t CacheStorage::BlocksForBytes(const ModelCacheRows& rows, uint32_t block_tokens, uint64_t bytes) {
  const uint64_t block_bytes = CacheLayout::Build(rows, block_tokens).block_bytes;
  if (block_bytes == 0) return 0;
  const uint64_t blocks = bytes / block_bytes;
  return blocks > INT32_MAX ? INT32_MAX : static_cast<int32_t>(blocks);
}

}  // namespace latent::cache
