// The cached rows one sequence's attention (or DSA indexer) reads, as the kernels take them: one
// pointer per position and the rows' format (kernels/row_format.h).
//
// Rows the kernels read in place (f32, bf16, and the fp8 encoding where kernels::RowsReadInPlace
// says so) are pointed at where the paged cache stores them: no copy. Any other row is converted
// into the object's own f32 buffer first, and the pointers point there; LATENT_ROWS_GATHER=1
// forces that path for every type (tests compare the two bit for bit: the kernels widen bf16 and
// decode fp8 exactly as the gather does, so both give the same result; not under bf16 products,
// kernels/attention.h, where the kernels round rows read in place to bf16 and f32 rows stay).
// The buffer only grows, so an object kept from step to step (ops/attention_workspace.h) gathers
// without allocating once it has held the longest context.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/scratch.h"
#include "cache/paged_rows.h"
#include "kernels/row_format.h"

namespace latent::ops {

// Whether rows are gathered into f32 copies whatever their type (LATENT_ROWS_GATHER=1, read
// once; or set by SetRowsGatherForced).
bool RowsGatherForced();
// Overrides LATENT_ROWS_GATHER (tests); not to be called while a forward runs.
void SetRowsGatherForced(bool forced);

// How a row is stored: plain elements of `dtype` (f32 or bf16), or with fp8_values > 0 the fp8
// encoding of cache/fp8_rows.h (cache::CacheRowSpec::fp8_values).
kernels::RowFormat StoredRowFormat(DType dtype, int64_t fp8_values);
// Whether a stored row is gathered into an f32 copy: where the kernels do not read it in place
// (kernels::RowsReadInPlace), or a gather is forced.
bool GatheredIntoF32(const kernels::RowFormat& stored);
// The format the kernels read a stored row in: f32 where it is gathered, else its own.
kernels::RowFormat KernelRowFormat(const kernels::RowFormat& stored);

class AttendedRows {
 public:
  // Row (layer, row) of positions [first, first + count) of the sequence whose table is `table`.
  void Range(const cache::PagedRows& cache, std::span<const cache::BlockId> table, int64_t layer,
             int row, int64_t first, int64_t count);
  // Row (layer, row) of the listed positions.
  void Positions(const cache::PagedRows& cache, std::span<const cache::BlockId> table,
                 int64_t layer, int row, std::span<const int32_t> positions);

  int64_t size() const { return static_cast<int64_t>(at_.size()); }
  const void* const* data() const { return at_.data(); }
  const void* operator[](int64_t i) const { return at_[i]; }
  // The format the rows are in: the stored rows' (read in place), or f32 (gathered).
  const kernels::RowFormat& format() const { return format_; }
  bool gathered() const { return gathered_; }  // f32 copies, not the stored rows
  // Values [begin, end) of row i in f32 into dst.
  void ToF32(int64_t i, int64_t begin, int64_t end, float* dst) const;

 private:
  // Sizes at_ to `count` and decides in place or gathered; returns the gather buffer (count *
  // width floats) when gathered, else null.
  float* Prepare(const cache::PagedRows& cache, int64_t layer, int row, int64_t count);

  std::vector<const void*> at_;  // [count] -> the row of each position
  kernels::RowFormat format_;
  Scratch<float> gathered_rows_;  // [count, width] the f32 copies, when gathered
  bool gathered_ = false;
};

}  // namespace latent::ops
