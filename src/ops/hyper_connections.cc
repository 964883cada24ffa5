#include "ops/hyper_connections.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "kernels/linear.h"

namespace latent::ops {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// mixes [T, rows] = (fn . flat) * rsqrt(mean(flat^2) + eps) for each token's flattened streams.
std::vector<float> Mixes(const HyperConnectionDims& d, const std::vector<float>& fn, int64_t rows,
                         const float* streams, int64_t tokens) {
  LATENT_CHECK(static_cast<int64_t>(fn.size()) == rows * d.flat());
  std::vector<float> mixes(tokens * rows);
  kernels::Linear(streams, tokens, kernels::WeightRef{fn.data(), DType::kF32, rows, d.flat()},
                  mixes.data());
  for (int64_t t = 0; t < tokens; ++t) {
    const float* flat = streams + t * d.flat();
    double squares = 0.0;
    for (int64_t i = 0; i < d.flat(); ++i) squares += static_cast<double>(flat[i]) * flat[i];
    const float inv_rms =
        1.0f / std::sqrt(static_cast<float>(squares / static_cast<double>(d.flat())) + d.norm_eps);
    for (int64_t r = 0; r < rows; ++r) mixes[t * rows + r] *= inv_rms;
  }
  return mixes;
}

}  // namespace

HyperGates ComputeHyperGates(const HyperConnectionDims& d, const HyperConnectionWeights& w,
                             const float* streams, int64_t tokens) {
  const int64_t n = d.streams;
  const int64_t rows = d.gate_rows();
  LATENT_CHECK(static_cast<int64_t>(w.base.size()) == rows && w.scale.size() >= (d.mix_streams ? 3u : 2u));
  const std::vector<float> mixes = Mixes(d, w.fn, rows, streams, tokens);
  HyperGates g;
  g.pre.resize(tokens * n);
  g.post.resize(tokens * n);
  if (d.mix_streams) g.comb.resize(tokens * n * n);
  const float post_eps = d.post_gate_eps ? d.gate_eps : 0.0f;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* m = &mixes[t * rows];
    for (int64_t i = 0; i < n; ++i) {
      g.pre[t * n + i] = Sigmoid(m[i] * w.scale[0] + w.base[i]) + d.gate_eps;
      g.post[t * n + i] = d.post_magnitude * Sigmoid(m[n + i] * w.scale[1] + w.base[n + i]) + post_eps;
    }
    if (d.mix_streams) {
      float* comb = &g.comb[t * n * n];
      for (int64_t i = 0; i < n * n; ++i) comb[i] = m[2 * n + i] * w.scale[2] + w.base[2 * n + i];
      SinkhornNormalize(d, comb);
    }
  }
  return g;
}

void SinkhornNormalize(const HyperConnectionDims& d, float* comb) {
  const int64_t n = d.streams;
  const float eps = d.gate_eps;
  for (int64_t r = 0; r < n; ++r) {  // softmax over each row's logits, then + eps
    float* row = comb + r * n;
    const float top = *std::max_element(row, row + n);
    float sum = 0.0f;
    for (int64_t c = 0; c < n; ++c) sum += row[c] = std::exp(row[c] - top);
    for (int64_t c = 0; c < n; ++c) row[c] = row[c] / sum + eps;
  }
  const auto columns = [&] {
    for (int64_t c = 0; c < n; ++c) {
      float sum = 0.0f;
      for (int64_t r = 0; r < n; ++r) sum += comb[r * n + c];
      for (int64_t r = 0; r < n; ++r) comb[r * n + c] /= sum + eps;
    }
  };
  const auto rows = [&] {
    for (int64_t r = 0; r < n; ++r) {
      float sum = 0.0f;
      for (int64_t c = 0; c < n; ++c) sum += comb[r * n + c];
      for (int64_t c = 0; c < n; ++c) comb[r * n + c] /= sum + eps;
    }
  };
  columns();
  for (int64_t i = 0; i + 1 < d.sinkhorn_iters; ++i) {
    rows();
    columns();
  }
}

void MeanCollapseStreams(const HyperConnectionDims& d, const float* streams, int64_t tokens, float* x) {
  const float count = static_cast<float>(d.streams);
  for (int64_t t = 0; t < tokens; ++t) {
    float* out = x + t * d.hidden;
    std::fill(out, out + d.hidden, 0.0f);
    for (int64_t i = 0; i < d.streams; ++i) {
      const float* s = streams + (t * d.streams + i) * d.hidden;
      for (int64_t c = 0; c < d.hidden; ++c) out[c] += s[c];
    }
    for (int64_t c = 0; c < d.hidden; ++c) out[c] /= count;
  }
}

void CollapseStreams(const HyperConnectionDims& d, const float* pre, const float* streams,
                     int64_t tokens, float* x) {
  for (int64_t t = 0; t < tokens; ++t) {
    float* out = x + t * d.hidden;
    std::fill(out, out + d.hidden, 0.0f);
    for (int64_t i = 0; i < d.streams; ++i) {  // streams in order, as torch.sum over dim 2
      const float p = pre[t * d.streams + i];
      const float* s = streams + (t * d.streams + i) * d.hidden;
      for (int64_t c = 0; c < d.hidden; ++c) out[c] += p * s[c];
    }
  }
}

void ExpandStreams(const HyperConnectionDims& d, const HyperGates& g, const float* branch,
                   int64_t tokens, float* streams) {
  const int64_t n = d.streams;
  std::vector<float> mixed;  // [N, D] one token's residuals, with comb
  for (int64_t t = 0; t < tokens; ++t) {
    float* s = streams + t * d.flat();
    if (!g.comb.empty()) {
      mixed.assign(d.flat(), 0.0f);
      for (int64_t m = 0; m < n; ++m)
        for (int64_t i = 0; i < n; ++i) {
          const float c = g.comb[(t * n + m) * n + i];
          for (int64_t k = 0; k < d.hidden; ++k) mixed[i * d.hidden + k] += c * s[m * d.hidden + k];
        }
      std::copy(mixed.begin(), mixed.end(), s);
    }
    const float* y = branch + t * d.hidden;
    for (int64_t i = 0; i < n; ++i) {
      const float p = g.post[t * n + i];
      float* row = s + i * d.hidden;
      for (int64_t k = 0; k < d.hidden; ++k) row[k] = p * y[k] + row[k];
    }
  }
}

void BroadcastStreams(const HyperConnectionDims& d, const float* x, int64_t tokens, float* streams) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < d.streams; ++i)
      std::copy(x + t * d.hidden, x + (t + 1) * d.hidden, streams + (t * d.streams + i) * d.hidden);
}

void HyperHeadCollapse(const HyperConnectionDims& d, const HyperHeadWeights& w, const float* streams,
                       int64_t tokens, float* x) {
  const int64_t n = d.streams;
  LATENT_CHECK(static_cast<int64_t>(w.base.size()) == n && w.scale.size() == 1);
  const std::vector<float> mixes = Mixes(d, w.fn, n, streams, tokens);
  std::vector<float> pre(tokens * n);
  for (int64_t i = 0; i < tokens * n; ++i)
    pre[i] = Sigmoid(mixes[i] * w.scale[0] + w.base[i % n]) + d.gate_eps;
  CollapseStreams(d, pre.data(), streams, tokens, x);
}

}  // namespace latent::ops
