#include "ops/rope.h"

#include <algorithm>
#include <cmath>

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
    if (y.mscale_all_dim != 0) {
      const double m = YarnMscale(y.factor, y.mscale_all_dim);
      softmax_scale *= m * m;
    }
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
