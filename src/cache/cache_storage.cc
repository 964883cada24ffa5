#include "cache/cache_storage.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <string>

#include "base/error.h"

namespace latent::cache {
namespace {

// Physical memory, or the cgroup's limit when lower (containers); 0 when unknown.
uint64_t MemoryLimitBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t limit = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    uint64_t cgroup = 0;
    if (in >> cgroup && cgroup > 0 && (limit == 0 || cgroup < limit)) limit = cgroup;
  }
  return limit;
}

std::string GiB(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", double(bytes) / double(uint64_t{1} << 30));
  return text;
}

}  // namespace

CacheStorage::CacheStorage(const ModelCacheRows& rows, const GroupedLayout& groups, int32_t num_blocks)
    : CacheStorage(groups.full_rows, groups.full.block_tokens, num_blocks, groups) {
  all_rows_ = rows;
}

CacheStorage::CacheStorage(ModelCacheRows rows, uint32_t block_tokens, int32_t num_blocks)
    : CacheStorage(std::move(rows), block_tokens, num_blocks, GroupedLayout{}) {}

CacheStorage::CacheStorage(ModelCacheRows rows, uint32_t block_tokens, int32_t num_blocks,
                           const GroupedLayout& groups)
    : rows_(std::move(rows)), layout_(CacheLayout::Build(rows_, block_tokens)), num_blocks_(num_blocks),
      groups_(groups) {
  layout_.block_bytes = std::max(layout_.block_bytes, groups_.block_bytes);
  if (num_blocks <= 0) Fail("the cache needs at least one block, got ", num_blocks);
  // calloc below would succeed (memory is overcommitted, pages come on first use) and the
  // process would be killed mid-serving once the cache filled; refuse at start-up instead.
  const uint64_t memory = MemoryLimitBytes();
  if (memory > 0 && total_bytes() > memory) {
    throw CacheTooLarge(StrCat("the KV cache needs ", GiB(total_bytes()), " (", num_blocks,
                               " blocks of ", layout_.block_bytes,
                               " bytes) but this machine has only ", GiB(memory), " of memory"));
  }
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
