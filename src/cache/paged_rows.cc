#include "cache/paged_rows.h"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/error.h"
#include "cache/fp8_rows.h"

namespace latent::cache {
namespace {

// One stored row of `width` values to f32 (fp8_values > 0: the fp8 encoding).
void CopyOut(DType dtype, int64_t fp8_values, const uint8_t* src, int64_t width, float* dst) {
  if (fp8_values > 0) {
    DecodeFp8Row(src, width, fp8_values, dst);
    return;
  }
  if (dtype == DType::kF32) {
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

}  // namespace

PagedRows PagedRows::Of(uint8_t* base, const ModelCacheRows& rows, const CacheLayout& layout,
                        int32_t num_blocks, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF8E4M3) {
    Fail("paged cache rows are f32, bf16 or fp8 (F8_E4M3); ", DTypeName(dtype), " rows are not supported");
  }
  PagedRows v;
  v.base = base;
  v.block_bytes = layout.block_bytes;
  v.block_tokens = layout.block_tokens;
  v.num_blocks = num_blocks;
  v.dtype = dtype;
  for (const auto& layer : rows) v.rows_per_layer = std::max(v.rows_per_layer, static_cast<int32_t>(layer.size()));
  v.slab_offset.assign(rows.size() * v.rows_per_layer, 0);
  v.row_bytes.assign(rows.size() * v.rows_per_layer, 0);
  v.row_values.assign(rows.size() * v.rows_per_layer, 0);
  v.row_fp8_values.assign(rows.size() * v.rows_per_layer, 0);
  for (size_t l = 0; l < rows.size(); ++l) {
    for (size_t r = 0; r < rows[l].size(); ++r) {
      const CacheRowSpec& spec = rows[l][r];
      const size_t i = l * v.rows_per_layer + r;
      v.slab_offset[i] = layout.slab_offset[l][r];
      v.row_bytes[i] = spec.bytes_per_token;
      if (spec.fp8_values > 0 && spec.bytes_per_token > 0) {
        if (dtype != DType::kF8E4M3) {
          FailInternal("row '", spec.name, "' of layer ", l, " is fp8-encoded in a ",
                       DTypeName(dtype), " cache");
        }
        if (spec.fp8_values > spec.values || spec.bytes_per_token != Fp8RowBytes(spec.values, spec.fp8_values)) {
          FailInternal("fp8 row '", spec.name, "' of layer ", l, ": ", spec.bytes_per_token,
                       " bytes per token for ", spec.values, " values, ", spec.fp8_values,
                       " of them fp8");
        }
        v.row_values[i] = spec.values;
        v.row_fp8_values[i] = spec.fp8_values;
      } else {
        // Plain elements: f32, or bf16 (a bf16 cache's rows, an fp8 cache's rows without fp8).
        v.row_values[i] = static_cast<int64_t>(spec.bytes_per_token / (dtype == DType::kF32 ? 4 : 2));
      }
    }
  }
  return v;
}

PagedRows PagedRows::OfGroups(uint8_t* base, const ModelCacheRows& rows, const GroupedLayout& groups,
                              int32_t num_blocks, DType dtype) {
  PagedRows v = Of(base, rows, groups.full, num_blocks, dtype);
  v.block_bytes = groups.block_bytes;
  if (!groups.has_window) return v;
  v.row_group.assign(v.row_bytes.size(), 0);
  v.group_block_tokens = {groups.full.block_tokens, groups.window_block_tokens};
  for (size_t l = 0; l < rows.size(); ++l) {
    for (size_t r = 0; r < rows[l].size(); ++r) {
      if (rows[l][r].retention != Retention::kWindow) continue;
      const size_t i = l * v.rows_per_layer + r;
      v.row_group[i] = 1;
      v.slab_offset[i] = groups.window.slab_offset[l][r];
    }
  }
  return v;
}

uint8_t* PagedRows::Locate(std::span<const BlockId> table, int64_t layer, int row, int64_t position) const {
  const int64_t tokens = GroupBlockTokens(Group(layer, row));
  LATENT_CHECK(position >= 0 && position < static_cast<int64_t>(table.size()) * tokens);
  const BlockId block = table[position / tokens];
  if (block == kNoBlock) {
    FailInternal("position ", position, " of layer ", layer, " row ", row,
                 " is read after its sliding-window block was released");
  }
  return RowAt(block, layer, row, static_cast<uint32_t>(position % tokens));
}

void PagedRows::RowPointers(std::span<const BlockId> table, int64_t layer, int row, int64_t first,
                            int64_t count, const void** out) const {
  if (count <= 0) return;
  const int64_t tokens = GroupBlockTokens(Group(layer, row));
  LATENT_CHECK(first >= 0 && first + count <= static_cast<int64_t>(table.size()) * tokens);
  const int64_t i = layer * rows_per_layer + row;
  const uint64_t stride = row_bytes[i];
  // Block by block: a block's rows are `stride` bytes apart.
  for (int64_t p = first; p < first + count;) {
    const BlockId block = table[p / tokens];
    if (block == kNoBlock) Locate(table, layer, row, p);  // fails, naming the position
    const int64_t in_block = p % tokens;
    const int64_t n = std::min<int64_t>(tokens - in_block, first + count - p);
    const uint8_t* at = base + static_cast<uint64_t>(block) * block_bytes + slab_offset[i] + in_block * stride;
    for (int64_t j = 0; j < n; ++j) out[p - first + j] = at + j * stride;
    p += n;
  }
}

void PagedRows::PositionPointers(std::span<const BlockId> table, int64_t layer, int row,
                                 std::span<const int32_t> positions, const void** out) const {
  for (size_t i = 0; i < positions.size(); ++i) out[i] = Locate(table, layer, row, positions[i]);
}

void PagedRows::WriteRow(std::span<const BlockId> table, int64_t layer, int row, int64_t position,
                         const float* values) const {
  uint8_t* dst = Locate(table, layer, row, position);
  const int64_t width = Width(layer, row);
  if (const int64_t fp8 = row_fp8_values[layer * rows_per_layer + row]; fp8 > 0) {
    EncodeFp8Row(values, width, fp8, dst);
    return;
  }
  if (dtype == DType::kF32) {
    std::memcpy(dst, values, width * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < width; ++i) {
    const uint16_t v = F32ToBF16(values[i]);
    std::memcpy(dst + 2 * i, &v, 2);
  }
}

void PagedRows::GatherRows(std::span<const BlockId> table, int64_t layer, int row, int64_t count,
                           float* out) const {
  const int64_t width = Width(layer, row);
  const int64_t fp8 = row_fp8_values[layer * rows_per_layer + row];
  for (int64_t p = 0; p < count; ++p) CopyOut(dtype, fp8, Locate(table, layer, row, p), width, out + p * width);
}

void PagedRows::GatherPositions(std::span<const BlockId> table, int64_t layer, int row,
                                std::span<const int32_t> positions, float* out) const {
  const int64_t width = Width(layer, row);
  const int64_t fp8 = row_fp8_values[layer * rows_per_layer + row];
  for (size_t i = 0; i < positions.size(); ++i) {
    CopyOut(dtype, fp8, Locate(table, layer, row, positions[i]), width, out + i * width);
  }
}

void PagedRows::CopyBlock(BlockId from, BlockId to, uint32_t count) const {
  for (int64_t i = 0; i < static_cast<int64_t>(row_bytes.size()); ++i) {
    if (row_bytes[i] == 0 || (!row_group.empty() && row_group[i] != 0)) continue;  // group 0 only
    const int64_t layer = i / rows_per_layer;
    const int row = static_cast<int>(i % rows_per_layer);
    std::memcpy(RowAt(to, layer, row, 0), RowAt(from, layer, row, 0), row_bytes[i] * count);
  }
}

}  // namespace latent::cache
