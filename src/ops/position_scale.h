// Learned log-position query scaling (mistral_large4's "ssmax" scaling, on its attention and its
// DSA indexer queries): head h of the query at `position` is multiplied by
//   scale[h] * ln(position + 1) + bias[h],
// which grows the attention logits with the context so softmax stays sharp at long range.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace latent::ops {

struct LogPositionScale {
  std::vector<float> scale, bias;  // [H]

  bool empty() const { return scale.empty(); }
  int64_t heads() const { return static_cast<int64_t>(scale.size()); }
  // factors [T, H] for the tokens at `positions`, in f32 as transformers computes them: the log
  // of (position + 1) as a float, then a product and a sum, each rounded.
  std::vector<float> Factors(std::span<const int64_t> positions) const;
};

// q [T, H, dim]: each head's row times factors [T, H].
void ScaleHeads(float* q, int64_t tokens, int64_t heads, int64_t dim, const float* factors);

}  // namespace latent::ops
