#include "engine/paged_latent_cache.h"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/error.h"
#include "tensor/dtype.h"

namespace latent::engine {

PagedLatentCache::PagedLatentCache(cache::CacheStorage& storage,
                                   std::vector<std::vector<int64_t>> row_values, model::CacheDType dtype)
    : storage_(storage), row_values_(std::move(row_values)), dtype_(dtype) {
  if (dtype != model::CacheDType::kF32 && dtype != model::CacheDType::kBF16) {
    Fail("the engine caches latent rows in f32 or bf16; ", model::CacheDTypeName(dtype),
         " rows are not supported yet");
  }
}

const uint8_t* PagedLatentCache::Locate(int64_t layer, int row, int32_t slot, int64_t position) const {
  const cache::BlockTable& table = *tables_.at(slot);
  const uint32_t bt = table.block_tokens();
  LATENT_CHECK(position < table.capacity());
  return storage_.RowAt(table.blocks()[position / bt], layer, row, static_cast<uint32_t>(position % bt));
}

void PagedLatentCache::WriteRow(int64_t layer, int row, int32_t slot, int64_t position,
                                const float* values) {
  uint8_t* dst = const_cast<uint8_t*>(Locate(layer, row, slot, position));
  const int64_t width = row_values_[layer][row];
  if (dtype_ == model::CacheDType::kF32) {
    std::memcpy(dst, values, width * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < width; ++i) {
    const uint16_t v = F32ToBF16(values[i]);
    std::memcpy(dst + 2 * i, &v, 2);
  }
}

void PagedLatentCache::CopyOut(const uint8_t* src, int64_t width, float* dst) const {
  if (dtype_ == model::CacheDType::kF32) {
    std::memcpy(dst, src, width * sizeof(float));
    return;
  }
  // bf16 -> f32 is the bf16 bits in the high half: interleave with zeros, 8 at a time (SSE2,
  // part of baseline x86-64).
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  for (; i + 8 <= width; i += 8) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_unpacklo_epi16(zero, v));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 4), _mm_unpackhi_epi16(zero, v));
  }
#endif
  for (; i < width; ++i) {
    uint16_t v;
    std::memcpy(&v, src + 2 * i, 2);
    const uint32_t bits = static_cast<uint32_t>(v) << 16;
    std::memcpy(dst + i, &bits, 4);
  }
}

void PagedLatentCache::GatherRows(int64_t layer, int row, int32_t slot, int64_t count,
                                  float* out) const {
  const int64_t width = row_values_[layer][row];
  for (int64_t p = 0; p < count; ++p) CopyOut(Locate(layer, row, slot, p), width, out + p * width);
}

void PagedLatentCache::GatherPositions(int64_t layer, int row, int32_t slot,
                                       std::span<const int32_t> positions, float* out) const {
  const int64_t width = row_values_[layer][row];
  for (size_t i = 0; i < positions.size(); ++i) {
    CopyOut(Locate(layer, row, slot, positions[i]), width, out + i * width);
  }
}

void PagedLatentCache::CopyBlock(cache::BlockId from, cache::BlockId to, uint32_t count) {
  const auto& rows = storage_.rows();
  for (size_t layer = 0; layer < rows.size(); ++layer) {
    for (size_t r = 0; r < rows[layer].size(); ++r) {
      std::memcpy(storage_.RowAt(to, layer, r, 0), storage_.RowAt(from, layer, r, 0),
                  rows[layer][r].bytes_per_token * count);
    }
  }
}

}  // namespace latent::engine
