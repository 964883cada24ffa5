// Where a sequence's rows switch from one way of computing them to another: the MLA form,
// expanded for a long prompt and absorbed after (model::ExpandedPositions), for each of the two
// kinds of attention layer. Rows computed differently differ in their last bits, so the bounds
// are part of a prefix-cache block's identity (cache::BlockTable) and of each sequence in a
// forward batch (ops::AttentionBatch).
#pragma once

#include <cstdint>

namespace latent::cache {

struct RegimeBounds {
  // Positions below it run expanded in the layers that attend the positions a DSA indexer
  // selected (every MLA layer of most DSA models) ...
  int64_t selected = 0;
  // ... and in the others, which attend their whole causal prefix or sliding window
  // (dots3_note's full and sliding-window layers). Equal to `selected` in a model without both.
  int64_t causal = 0;

  // Both kinds at `bound`.
  static RegimeBounds Both(int64_t bound) { return {bound, bound}; }
  // The bound of a layer that attends a DSA selection (`selects`) or not.
  int64_t For(bool selects) const { return selects ? selected : causal; }
  bool operator==(const RegimeBounds&) const = default;
};

}  // namespace latent::cache
