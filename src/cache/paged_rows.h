// PagedRows: a plain view of the paged cache's bytes, enough to find any row of any token in
// place: block b starts at base + b * block_bytes; row r of layer l of the token at offset t in
// the block starts at slab_offset[l, r] + t * row_bytes[l, r] within it. A sequence's block-table
// row (its block ids, in order) maps position p to block row[p / block_tokens], offset
// p % block_tokens.
//
// `dtype` is the cache's: kF32 or kBF16 (every row holds elements of it), or kF8E4M3 (an fp8
// cache: each row says its own encoding, row_fp8_values, cache/fp8_rows.h; rows without fp8
// values are bf16). Kernels read rows through this view in place (RowPointers: attention and the
// DSA indexer; fp8 rows decoded as they load, kernels/row_format.h); WriteRow and the Gather
// helpers below convert to and from f32 for code that wants contiguous f32 rows (they dequantize
// fp8 rows).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/block_pool.h"
#include "cache/cache_layout.h"
#include "cache/state_slots.h"
#include "tensor/dtype.h"

namespace latent::cache {

struct PagedRows {
  uint8_t* base = nullptr;  // Block 0; the storage owns the bytes.
  uint64_t block_bytes = 0;
  uint32_t block_tokens = 0;
  int32_t num_blocks = 0;
  DType dtype = DType::kF32;  // kF32, kBF16 or kF8E4M3 (rows encoded per row_fp8_values)
  int32_t rows_per_layer = 0;  // Stride of the two tables below.
  std::vector<uint64_t> slab_offset;  // [layers, rows_per_layer] byte offset in a block
  std::vector<uint64_t> row_bytes;    // [layers, rows_per_layer] bytes per token; 0: no such row
  std::vector<int64_t> row_values;    // [layers, rows_per_layer] values per token
  // [layers, rows_per_layer] CacheRowSpec::fp8_values: > 0 only in an fp8 cache, for rows in the
  // fp8 encoding (cache/fp8_rows.h).
  std::vector<int64_t> row_fp8_values;
  // Retention groups (GroupedLayout): [layers, rows_per_layer] the group of each row, empty when
  // every row is in group 0; a sequence has one block table per group, and group g's blocks hold
  // group_block_tokens[g] tokens (group 0's is block_tokens).
  std::vector<uint8_t> row_group;
  std::vector<uint32_t> group_block_tokens;
  // The per-sequence state slots (kPerSequence rows) beside the blocks; empty when the model
  // declares none. Set by the owner of both (engine::CacheManager).
  StateSlots states;

  // Builds the view of `num_blocks` blocks laid out by `layout` at `base`. dtype kF32 or kBF16:
  // plain rows of that element (a row with fp8_values fails); kF8E4M3: each row's encoding from
  // its spec (fp8_values > 0: the fp8 encoding, else bf16). Any other dtype, or a row whose bytes
  // do not match its encoding, fails.
  static PagedRows Of(uint8_t* base, const ModelCacheRows& rows, const CacheLayout& layout,
                      int32_t num_blocks, DType dtype);
  // The view of blocks laid out by `groups` (base holds num_blocks blocks of groups.block_bytes).
  static PagedRows OfGroups(uint8_t* base, const ModelCacheRows& rows, const GroupedLayout& groups,
                            int32_t num_blocks, DType dtype);

  int Group(int64_t layer, int row) const {
    return row_group.empty() ? 0 : row_group[layer * rows_per_layer + row];
  }
  int num_groups() const { return group_block_tokens.empty() ? 1 : static_cast<int>(group_block_tokens.size()); }
  // Tokens per block of `group`.
  uint32_t GroupBlockTokens(int group) const {
    return group_block_tokens.empty() ? block_tokens : group_block_tokens[group];
  }

  int64_t num_layers() const { return rows_per_layer == 0 ? 0 : static_cast<int64_t>(row_bytes.size()) / rows_per_layer; }
  // Values per token of (layer, row).
  int64_t Width(int64_t layer, int row) const { return row_values[layer * rows_per_layer + row]; }
  // The element type of (layer, row)'s values when they are plain (kF32 or kBF16), kF8E4M3 when
  // the row is in the fp8 encoding.
  DType RowDType(int64_t layer, int row) const {
    if (row_fp8_values[layer * rows_per_layer + row] > 0) return DType::kF8E4M3;
    return dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
  }
  // The bytes of (layer, row) of the token at `token_in_block` of `block`.
  uint8_t* RowAt(BlockId block, int64_t layer, int row, uint32_t token_in_block) const {
    const int64_t i = layer * rows_per_layer + row;
    return base + static_cast<uint64_t>(block) * block_bytes + slab_offset[i] +
           token_in_block * row_bytes[i];
  }
  // The bytes of (layer, row) of `position` of the sequence whose block-table row (of the row's
  // group) is `table`; fails when the table does not reach `position` or released its block.
  uint8_t* Locate(std::span<const BlockId> table, int64_t layer, int row, int64_t position) const;

  // In place: out[i] = the bytes of row (layer, row) of position first + i, for i < count (fails
  // as Locate does). A kernel reads them where they are stored (kernels/attention.h).
  void RowPointers(std::span<const BlockId> table, int64_t layer, int row, int64_t first,
                   int64_t count, const void** out) const;
  // In place: out[i] = the bytes of row (layer, row) of positions[i].
  void PositionPointers(std::span<const BlockId> table, int64_t layer, int row,
                        std::span<const int32_t> positions, const void** out) const;

  // Stores f32 `values` as row (layer, row) of `position`.
  void WriteRow(std::span<const BlockId> table, int64_t layer, int row, int64_t position,
                const float* values) const;
  // Copies row (layer, row) of positions [0, count) to out [count, width] in f32.
  void GatherRows(std::span<const BlockId> table, int64_t layer, int row, int64_t count,
                  float* out) const;
  // Copies row (layer, row) of the listed positions to out [positions.size(), width] in f32.
  void GatherPositions(std::span<const BlockId> table, int64_t layer, int row,
                       std::span<const int32_t> positions, float* out) const;
  // Copies every row of the first `count` tokens of block `from` into block `to` (forking a
  // partially filled block).
  void CopyBlock(BlockId from, BlockId to, uint32_t count) const;
};

}  // namespace latent::cache
