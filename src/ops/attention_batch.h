// AttentionBatch: what attention and the DSA indexers read of a packed batch of T tokens from S
// sequences: the tokens' positions and sequences, each sequence's block-table rows and the paged
// rows view they index. Sequence s is slot s: its tokens are the batch rows [seq_starts[s],
// seq_starts[s + 1]), at consecutive positions right after its cached ones. The model's
// ForwardBatch (model/model.h) is this plus what only the model reads (token ids, logits rows,
// state slots); it is built once per step and the blocks group tokens by sequence from here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "cache/block_pool.h"
#include "cache/paged_rows.h"
#include "cache/regime_bounds.h"

namespace latent::ops {

// How MLA attention is computed (DESIGN §5). kAuto picks per sequence, by
// AttentionBatch::expanded_below.
enum class AttentionForm : uint8_t { kAuto, kAbsorbed, kExpanded };

struct AttentionBatch {
  std::vector<int64_t> positions;    // [T]
  std::vector<int32_t> seq_slots;    // [T] slot (sequence index) of the token
  std::vector<int32_t> seq_starts;   // [S + 1] first batch row of each sequence, then T
  std::vector<int64_t> context_lens;  // [S] positions cached once the step ran (last position + 1)
  // [S] under AttentionForm::kAuto, the sequence's positions below its bound for a layer's kind
  // are computed in the expanded MLA form there and the rest absorbed (model::ExpandedPositions):
  // a property of the sequence, so a token's form never depends on the chunk or batch that
  // carries it.
  std::vector<cache::RegimeBounds> expanded_below;
  // Block-table rows, ragged: sequence s's block ids are
  // block_ids[block_table_starts[s] .. block_table_starts[s + 1]).
  std::vector<int32_t> block_table_starts;  // [S + 1]
  std::vector<cache::BlockId> block_ids;
  // Sliding-window rows (the cache's retention group 1, cache::GroupedLayout): each sequence's
  // window block-table row, ragged like block_ids (released blocks are cache::kNoBlock); empty
  // when the cache has no window rows.
  std::vector<int32_t> window_table_starts;  // [S + 1]
  std::vector<cache::BlockId> window_block_ids;
  const cache::PagedRows* rows = nullptr;  // The paged cache the step reads and writes.
  // [S] or empty: each sequence's prompt length, pushed by the caller after adding the sequence.
  // Rotary frequencies that depend on the sequence length (LongRoPE) read it through
  // RotaryLength, so that a prompt gets the same ones whether it runs in one chunk or several.
  std::vector<int64_t> prompt_lens;

  int64_t num_tokens() const { return static_cast<int64_t>(positions.size()); }
  int64_t num_sequences() const { return static_cast<int64_t>(context_lens.size()); }
  // The block-table row of sequence `s`.
  std::span<const cache::BlockId> BlockTable(int64_t s) const {
    return std::span<const cache::BlockId>(block_ids).subspan(
        block_table_starts.at(s), block_table_starts.at(s + 1) - block_table_starts[s]);
  }
  // The block-table row of sequence `s` that holds row `row` of layer `layer` (its group's).
  std::span<const cache::BlockId> RowTable(int64_t s, int64_t layer, int row) const {
    if (rows->Group(layer, row) == 0) return BlockTable(s);
    return std::span<const cache::BlockId>(window_block_ids)
        .subspan(window_table_starts.at(s), window_table_starts.at(s + 1) - window_table_starts[s]);
  }
  // Appends the window block-table row of the sequence just added (caches with window rows).
  void AddWindowTable(std::span<const cache::BlockId> table);
  // The sequence length that picks length-dependent rotary frequencies for token t: what
  // transformers sees running the whole prompt in one call, then decoding token by token
  // (max(prompt length, position + 1)); without prompt_lens, the sequence's context in this step.
  int64_t RotaryLength(int64_t t) const {
    const int64_t s = seq_slots[t];
    return std::max(positions[t] + 1, prompt_lens.empty() ? context_lens[s] : prompt_lens[s]);
  }
};

}  // namespace latent::ops
