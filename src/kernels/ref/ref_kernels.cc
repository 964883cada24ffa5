// Plain scalar kernels: simple loops in the order the math is written, f32 accumulation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/error.h"
#include "kernels/bf16_activations.h"
#include "kernels/kernel_table.h"
#include "kernels/ref/linear_w8a8_ref.h"

namespace latent::kernels {
namespace {

void RefDequantRow(const WeightRef& w, int64_t row, float* out) {
  const int64_t base = row * w.k;
  for (int64_t c = 0; c < w.k; ++c) out[c] = LoadAsF32(w.data, w.dtype, base + c);
  if (w.scale != nullptr) {
    const int64_t scale_cols = (w.k + w.block_k - 1) / w.block_k;
    const int64_t scale_row = (w.scale_row0 + row) / w.block_n;
    for (int64_t c = 0; c < w.k; ++c) {
      out[c] *= LoadAsF32(w.scale, w.scale_dtype, scale_row * scale_cols + c / w.block_k);
    }
  }
}

void RefLinear(const float* x, int64_t m, const WeightRef& w, float* y, float* scratch) {
  if (w.row_sums != nullptr) return LinearW8A8Ref(x, m, w, y);
  thread_local std::vector<float> rounded;  // bf16(x) when the weight asks for it
  x = Bf16Input(x, m * w.k, w, rounded, RoundToBf16Scalar);
  for (int64_t r = 0; r < w.n; ++r) {
    RefDequantRow(w, r, scratch);
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * w.k;
      float acc = 0.0f;
      for (int64_t c = 0; c < w.k; ++c) acc += xi[c] * scratch[c];
      y[i * w.n + r] = acc;
    }
  }
}

void RefRmsNorm(const float* x, int64_t m, int64_t d, const void* weight, DType weight_dtype,
                float eps, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * d;
    float sum_sq = 0.0f;
    for (int64_t c = 0; c < d; ++c) sum_sq += xi[c] * xi[c];
    const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(d) + eps);
    for (int64_t c = 0; c < d; ++c) y[i * d + c] = LoadAsF32(weight, weight_dtype, c) * (xi[c] * inv);
  }
}

void RefLayerNorm(const float* x, int64_t m, int64_t d, const void* weight, const void* bias,
                  DType dtype, float eps, float* y) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * d;
    float mean = 0.0f;
    for (int64_t c = 0; c < d; ++c) mean += xi[c];
    mean /= static_cast<float>(d);
    float var = 0.0f;
    for (int64_t c = 0; c < d; ++c) var += (xi[c] - mean) * (xi[c] - mean);
    var /= static_cast<float>(d);
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int64_t c = 0; c < d; ++c) {
      y[i * d + c] = (xi[c] - mean) * inv * LoadAsF32(weight, dtype, c) + LoadAsF32(bias, dtype, c);
    }
  }
}

void RefSiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

float RefExpWeights(const float* x, int64_t n, float scale, int64_t block, float* w,
                    double* block_mass) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  float max = minus_inf;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  for (int64_t b = 0; b * block < n; ++b) {
    double sum = 0;
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
      w[i] = x[i] == minus_inf ? 0.0f : std::exp((x[i] - max) * scale);
      sum += w[i];
    }
    block_mass[b] = sum;
  }
  return max;
}

int64_t RefArgmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[best] < x[i]) best = i;
  }
  return best;
}

void RefTransposedLinear(const float* x, int64_t m, const WeightRef& w, float* y) {
  thread_local std::vector<float> rounded;  // bf16(x) when the weight asks for it
  x = Bf16Input(x, m * w.n, w, rounded, RoundToBf16Scalar);
  std::vector<float> row(w.k);
  std::fill(y, y + m * w.k, 0.0f);
  for (int64_t r = 0; r < w.n; ++r) {
    RefDequantRow(w, r, row.data());
    for (int64_t i = 0; i < m; ++i) {
      const float a = x[i * w.n + r];
      float* yi = y + i * w.k;
      for (int64_t c = 0; c < w.k; ++c) yi[c] += a * row[c];
    }
  }
}

}  // namespace

const KernelTable& RefKernels() {
  static const KernelTable table{RefLinear,  RefDequantRow,       RefRmsNorm,  RefLayerNorm,
                                 RefSiluMul, RefTransposedLinear, AttentionRef,
                                 AttentionQueriesRef, NormRopeRef, IndexScoresRef,
                                 RefExpWeights, RefArgmax};
  return table;
}

}  // namespace latent::kernels
