#include "ops/attended_rows.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "base/env.h"
#include "cache/fp8_rows.h"

namespace latent::ops {
namespace {

std::atomic<bool>& GatherForced() {
  static std::atomic<bool> forced = [] {
    return EnvBool("LATENT_ROWS_GATHER").value_or(false);
  }();
  return forced;
}

}  // namespace

kernels::RowFormat StoredRowFormat(DType dtype, int64_t fp8_values) {
  if (fp8_values <= 0) return dtype;
  return kernels::RowFormat::Fp8(fp8_values, cache::kFp8Group, cache::Fp8ScalesAt(fp8_values),
                                 cache::Fp8TailAt(fp8_values));
}

bool GatheredIntoF32(const kernels::RowFormat& stored) {
  return !kernels::RowsReadInPlace(stored) || RowsGatherForced();
}

kernels::RowFormat KernelRowFormat(const kernels::RowFormat& stored) {
  return GatheredIntoF32(stored) ? kernels::RowFormat(DType::kF32) : stored;
}

bool RowsGatherForced() { return GatherForced().load(std::memory_order_relaxed); }

void SetRowsGatherForced(bool forced) { GatherForced().store(forced, std::memory_order_relaxed); }

float* AttendedRows::Prepare(const cache::PagedRows& cache, int64_t layer, int row, int64_t count) {
  at_.resize(count);
  const kernels::RowFormat stored = StoredRowFormat(
      cache.RowDType(layer, row), cache.row_fp8_values[layer * cache.rows_per_layer + row]);
  gathered_ = GatheredIntoF32(stored);
  format_ = gathered_ ? kernels::RowFormat(DType::kF32) : stored;  // KernelRowFormat's rule
  if (!gathered_) return nullptr;
  // Reused across calls: at long context a fresh buffer is tens of MB, which glibc maps anew each
  // time (past its 32 MiB mmap threshold), so every step would pay a page fault per 4 KiB.
  return gathered_rows_.Get(count * cache.Width(layer, row));
}

void AttendedRows::Range(const cache::PagedRows& cache, std::span<const cache::BlockId> table,
                         int64_t layer, int row, int64_t first, int64_t count) {
  float* gathered = Prepare(cache, layer, row, count);
  if (gathered == nullptr) {
    cache.RowPointers(table, layer, row, first, count, at_.data());
    return;
  }
  const int64_t width = cache.Width(layer, row);
  if (first == 0) {
    cache.GatherRows(table, layer, row, count, gathered);
  } else {
    std::vector<int32_t> positions(count);
    for (int64_t i = 0; i < count; ++i) positions[i] = static_cast<int32_t>(first + i);
    cache.GatherPositions(table, layer, row, positions, gathered);
  }
  for (int64_t i = 0; i < count; ++i) at_[i] = gathered + i * width;
}

void AttendedRows::Positions(const cache::PagedRows& cache, std::span<const cache::BlockId> table,
                             int64_t layer, int row, std::span<const int32_t> positions) {
  const int64_t count = static_cast<int64_t>(positions.size());
  float* gathered = Prepare(cache, layer, row, count);
  if (gathered == nullptr) {
    cache.PositionPointers(table, layer, row, positions, at_.data());
    return;
  }
  const int64_t width = cache.Width(layer, row);
  cache.GatherPositions(table, layer, row, positions, gathered);
  for (int64_t i = 0; i < count; ++i) at_[i] = gathered + i * width;
}

void AttendedRows::ToF32(int64_t i, int64_t begin, int64_t end, float* dst) const {
  if (format_.dtype == DType::kF8E4M3) {
    // As the gather decodes (cache::DecodeFp8Row): whole codes by its vector path, the rest as
    // kernels::RowValue, whose code * scale is the same f32 product.
    const uint8_t* row = static_cast<const uint8_t*>(at_[i]);
    int64_t c = begin;
    if (begin == 0 && end >= format_.fp8_values) {
      cache::DecodeFp8Row(row, format_.fp8_values, format_.fp8_values, dst);
      c = format_.fp8_values;
    }
    for (; c < end; ++c) dst[c - begin] = kernels::RowValue(format_, row, c);
    return;
  }
  if (format_.dtype == DType::kBF16) {
    const uint16_t* src = static_cast<const uint16_t*>(at_[i]);
    for (int64_t c = begin; c < end; ++c) dst[c - begin] = BF16ToF32(src[c]);
    return;
  }
  const float* src = static_cast<const float*>(at_[i]);
  std::copy(src + begin, src + end, dst);
}

}  // namespace latent::ops
