// Rotary position embedding: default, linear, llama3, YaRN and LongRoPE frequencies, applied to
// pairs of a head's rotary part. The pairing is either adjacent (2i, 2i+1) — DeepSeek V3's
// interleaved layout and V2's complex form — or split in halves (i, i + d/2). Queries and keys use
// the same pairing, so q.k equals transformers' whatever order it writes the rotated values in.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/rope_config.h"

namespace latent::ops {

struct Rope {
  int64_t dim = 0;               // Rotary dims per head (qk_rope_head_dim).
  bool interleaved = true;       // Pairs (2i, 2i+1); else (i, i + dim/2).
  bool round_cos_sin_bf16 = false;  // transformers rounds cos/sin to the activation dtype.
  std::vector<float> inv_freq;   // [dim / 2]
  float attention_factor = 1.0f; // Multiplies cos and sin (YaRN).
  float softmax_scale = 1.0f;    // qk_head_dim^-0.5 times the YaRN mscale^2.
  // LongRoPE: the frequencies of sequences longer than `long_after` positions (inv_freq holds
  // the short set); empty for other rope types.
  std::vector<float> long_inv_freq;  // [dim / 2]
  int64_t long_after = 0;

  // Frequencies as transformers computes them (default or yarn), in f32, for `rope_dim` rotary
  // dims of heads whose query.key spans `qk_head_dim` dims.
  static Rope FromConfig(const RopeConfig& config, int64_t rope_dim, int64_t qk_head_dim,
                         bool interleaved, bool round_bf16);

  // cos/sin [dim / 2] of `position`.
  void CosSin(int64_t position, float* cos, float* sin) const;
  // cos/sin [dim / 2] of `position` in a sequence of `length` positions: LongRoPE takes its long
  // frequencies when length > long_after, as transformers decides per forward call.
  void CosSin(int64_t position, int64_t length, float* cos, float* sin) const;
  // Rotates `x` [dim] in place with the given cos/sin.
  void Apply(float* x, const float* cos, const float* sin) const;
};

}  // namespace latent::ops
