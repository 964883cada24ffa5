// RoPE settings as config.json states them (rope_parameters / rope_scaling).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace latent::ops {

enum class RopeType : uint8_t { kDefault, kLinear, kLlama3, kYarn, kLongRope };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  // Every type but kDefault: `factor` (linear: every frequency divided by it; llama3: the
  // low frequencies; YaRN and LongRoPE below), and mscale_all_dim below.
  double factor = 1.0;
  // YaRN, LongRoPE and llama3: the context the model was trained on.
  int64_t original_max_position_embeddings = 0;
  // llama3: frequencies whose wavelength exceeds original / low_freq_factor are divided by
  // `factor`, those below original / high_freq_factor kept, those between interpolated.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // YaRN (type == kYarn):
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  // 0 means absent, as transformers reads a missing or zero value: with both set, YaRN's cos/sin
  // are scaled by mscale(factor, mscale) / mscale(factor, mscale_all_dim); with mscale_all_dim
  // set, every type but kDefault multiplies the softmax scale by mscale(factor, mscale_all_dim)^2
  // (the MLA families' yarn_apply_mscale tests the type, not yarn).
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
