// RoPE settings as config.json states them (rope_parameters / rope_scaling).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace latent::ops {

enum class RopeType : uint8_t { kDefault, kYarn, kLongRope };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  // YaRN (type == kYarn):
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  // 0 means absent, as transformers reads a missing or zero value: with both set, cos/sin are
  // scaled by mscale(factor, mscale) / mscale(factor, mscale_all_dim); with mscale_all_dim set,
  // the softmax scale is multiplied by mscale(factor, mscale_all_dim)^2.
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  std::optional<double> attention_factor;      // Overrides the cos/sin factor when set.
  bool truncate = true;                        // Round the YaRN correction range to integers.
  // LongRoPE (type == kLongRope): per-frequency divisors [rope_dim / 2], the short set for
  // sequences of at most original_max_position_embeddings positions, the long set beyond;
  // `factor` (max_position_embeddings / original when unstated) sets the cos/sin factor
  // sqrt(1 + ln(factor) / ln(original)) unless attention_factor is given.
  std::vector<double> short_factor, long_factor;
};

}  // namespace latent::ops
