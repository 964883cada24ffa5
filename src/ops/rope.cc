#include "ops/rope.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "tensor/dtype.h"

namespace latent::ops {
namespace {

double YarnMscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// Dimension index at which the wavelength completes `rotations` turns over `max_pos` positions.
double CorrectionDim(double rotations, int64_t dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (rotations * 2 * M_PI))) / (2 * std::log(base));
}

// transformers' _compute_longrope_parameters: inv_freq = 1 / (ext_i * base^(2i/d)) in f32, the
// short and the long divisors both; the cos/sin factor from `factor` and the original length.
void LongRope(const RopeConfig& y, const std::vector<float>& pos_freqs, Rope& rope) {
  const size_t half = pos_freqs.size();
  LATENT_CHECK(y.short_factor.size() == half && y.long_factor.size() == half);
  rope.long_inv_freq.resize(half);
  for (size_t i = 0; i < half; ++i) {
    rope.inv_freq[i] = 1.0f / (static_cast<float>(y.short_factor[i]) * pos_freqs[i]);
    rope.long_inv_freq[i] = 1.0f / (static_cast<float>(y.long_factor[i]) * pos_freqs[i]);
  }
  rope.long_after = y.original_max_position_embeddings;
  if (y.attention_factor) {
    rope.attention_factor = static_cast<float>(*y.attention_factor);
  } else if (y.factor <= 1.0) {
    rope.attention_factor = 1.0f;
  } else {
    rope.attention_factor = static_cast<float>(std::sqrt(
        1.0 + std::log(y.factor) / std::log(static_cast<double>(y.original_max_position_embeddings))));
  }
}

// transformers' _compute_llama3_parameters, in f32 as its torch ops: a frequency whose
// wavelength is longer than original / low_freq_factor is divided by `factor`, one shorter than
// original / high_freq_factor kept, and one between them interpolated by how many turns it
// makes over the original context.
void Llama3(const RopeConfig& y, const std::vector<float>& pos_freqs, Rope& rope) {
  const float factor = static_cast<float>(y.factor);
  const float low = static_cast<float>(y.low_freq_factor);
  const float width = static_cast<float>(y.high_freq_factor - y.low_freq_factor);  // in double
  const float original = static_cast<float>(y.original_max_position_embeddings);
  const double context = static_cast<double>(y.original_max_position_embeddings);
  const float low_freq_wavelen = static_cast<float>(context / y.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(context / y.high_freq_factor);
  for (size_t i = 0; i < pos_freqs.size(); ++i) {
    const float inv_freq = 1.0f / pos_freqs[i];
    const float wavelen = static_cast<float>(2 * M_PI) / inv_freq;
    if (wavelen > low_freq_wavelen) {
      rope.inv_freq[i] = inv_freq / factor;
    } else if (wavelen < high_freq_wavelen) {
      rope.inv_freq[i] = inv_freq;
    } else {
      const float smooth = (original / wavelen - low) / width;
      rope.inv_freq[i] = (1.0f - smooth) * inv_freq / factor + smooth * inv_freq;
    }
  }
}

}  // namespace

Rope Rope::FromConfig(const RopeConfig& y, int64_t rope_dim, int64_t qk_head_dim,
                      bool interleaved, bool round_bf16) {
  Rope rope;
  rope.dim = rope_dim;
  rope.interleaved = interleaved;
  rope.round_cos_sin_bf16 = round_bf16;
  const int64_t half = rope.dim / 2;
  const float base = static_cast<float>(y.theta);
  // transformers: base ** (arange(0, dim, 2).float() / dim), in f32.
  std::vector<float> pos_freqs(half);
  for (int64_t i = 0; i < half; ++i) {
    pos_freqs[i] = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(rope.dim));
  }
  rope.inv_freq.resize(half);
  double softmax_scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim));
  if (y.type == RopeType::kDefault) {
    for (int64_t i = 0; i < half; ++i) rope.inv_freq[i] = 1.0f / pos_freqs[i];
  } else if (y.type == RopeType::kLinear) {
    // transformers divides the default frequencies by the factor (in f32).
    const float factor = static_cast<float>(y.factor);
    for (int64_t i = 0; i < half; ++i) rope.inv_freq[i] = 1.0f / pos_freqs[i] / factor;
  } else if (y.type == RopeType::kLlama3) {
    Llama3(y, pos_freqs, rope);
  } else if (y.type == RopeType::kLongRope) {
    LongRope(y, pos_freqs, rope);
  } else {
    const float factor = static_cast<float>(y.factor);
    double low = CorrectionDim(y.beta_fast, rope.dim, y.theta, y.original_max_position_embeddings);
    double high = CorrectionDim(y.beta_slow, rope.dim, y.theta, y.original_max_position_embeddings);
    if (y.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(rope.dim - 1));
    if (low == high) high += 0.001;  // As transformers: avoid a zero-width ramp.
    for (int64_t i = 0; i < half; ++i) {
      // In f32, as transformers' torch ops compute it.
      const float ramp = std::clamp(
          (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f,
          1.0f);
      const float extrapolation_factor = 1.0f - ramp;
      const float extrapolation = 1.0f / pos_freqs[i];
      const float interpolation = 1.0f / (factor * pos_freqs[i]);
      rope.inv_freq[i] = interpolation * (1.0f - extrapolation_factor) +
                         extrapolation * extrapolation_factor;
    }
    if (y.attention_factor) {
      rope.attention_factor = static_cast<float>(*y.attention_factor);
    } else if (y.mscale != 0 && y.mscale_all_dim != 0) {
      rope.attention_factor =
          static_cast<float>(YarnMscale(y.factor, y.mscale) / YarnMscale(y.factor, y.mscale_all_dim));
    } else {
      rope.attention_factor = static_cast<float>(YarnMscale(y.factor, 1.0));
    }
  }
  // The MLA families' yarn_apply_mscale: any type but default, not only YaRN.
  if (y.type != RopeType::kDefault && y.mscale_all_dim != 0) {
    const double m = YarnMscale(y.factor, y.mscale_all_dim);
    softmax_scale *= m * m;
  }
  rope.softmax_scale = static_cast<float>(softmax_scale);
  return rope;
}

void Rope::CosSin(int64_t position, float* cos, float* sin) const {
  const float pos = static_cast<float>(position);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float angle = pos * inv_freq[i];
    cos[i] = std::cos(angle) * attention_factor;
    sin[i] = std::sin(angle) * attention_factor;
    if (round_cos_sin_bf16) {
      cos[i] = RoundToBF16(cos[i]);
      sin[i] = RoundToBF16(sin[i]);
    }
  }
}

void Rope::CosSin(int64_t position, int64_t length, float* cos, float* sin) const {
  if (long_inv_freq.empty() || length <= long_after) {
    CosSin(position, cos, sin);
    return;
  }
  const float pos = static_cast<float>(position);
  for (size_t i = 0; i < long_inv_freq.size(); ++i) {
    const float angle = pos * long_inv_freq[i];
    cos[i] = std::cos(angle) * attention_factor;
    sin[i] = std::sin(angle) * attention_factor;
    if (round_cos_sin_bf16) {
      cos[i] = RoundToBF16(cos[i]);
      sin[i] = RoundToBF16(sin[i]);
    }
  }
}

void Rope::Apply(float* x, const float* cos, const float* sin) const {
  const int64_t half = dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    float* a = interleaved ? &x[2 * i] : &x[i];
    float* b = interleaved ? &x[2 * i + 1] : &x[i + half];
    const float x0 = *a, x1 = *b;
    *a = x0 * cos[i] - x1 * sin[i];
    *b = x1 * cos[i] + x0 * sin[i];
  }
}

}  // namespace latent::ops
