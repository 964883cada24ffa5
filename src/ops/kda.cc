#include "ops/kda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/linear.h"
#include "tensor/dtype.h"

namespace latent::ops {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Offsets of the fields of one block row (per head), in floats.
struct RowLayout {
  int64_t k, gcum, v, v_new, beta, solve, size;
  explicit RowLayout(int64_t d)
      : k(0), gcum(d), v(2 * d), v_new(3 * d), beta(4 * d), solve(4 * d + 1), size(4 * d + 1 + kKdaChunk) {}
};

}  // namespace

namespace {

// g [rows, C] = f_b(f_a(x)): the low-rank forget gate's logits.
void LowRankGateLogits(const KdaDims& dims, const KdaForgetGateWeights& w, const float* x,
                       int64_t rows, float* g) {
  std::vector<float> low(rows * dims.head_dim);  // [rows, dk]
  kernels::Linear(x, rows, w.f_a, low.data());
  kernels::Linear(low.data(), rows, w.f_b, g);
}

// g [rows, C] in place: each logit v of head h becomes gate(exp(A_log_h), v + dt_bias), the
// form every forget gate shares.
template <class Gate>
void ApplyForgetGate(const KdaDims& dims, const std::vector<float>& a_log,
                     const std::vector<float>& dt_bias, int64_t rows, float* g, Gate gate) {
  const int64_t c = dims.channels(), d = dims.head_dim;
  LATENT_CHECK(static_cast<int64_t>(dt_bias.size()) == c &&
               static_cast<int64_t>(a_log.size()) == dims.heads);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < dims.heads; ++h) {
      const float rate = std::exp(a_log[h]);
      for (int64_t i = 0; i < d; ++i) {
        float& v = g[r * c + h * d + i];
        v = gate(rate, v + dt_bias[h * d + i]);
      }
    }
  }
}

}  // namespace

void KimiForgetGate(const KdaDims& dims, const KdaForgetGateWeights& w, const float* x, int64_t rows,
                    float* g) {
  LowRankGateLogits(dims, w, x, rows, g);
  ApplyForgetGate(dims, w.a_log, w.dt_bias, rows, g, [](float rate, float z) {
    const float softplus = z > 20.0f ? z : std::log(1.0f + std::exp(z));
    return -rate * softplus;
  });
}

void Glm5NextForgetGate(const KdaDims& dims, const KdaForgetGateWeights& w, const float* x,
                        int64_t rows, float* g) {
  LowRankGateLogits(dims, w, x, rows, g);
  const float bound = dims.gate_lower_bound;
  ApplyForgetGate(dims, w.a_log, w.dt_bias, rows, g,
                  [bound](float rate, float z) { return bound * Sigmoid(rate * z); });
}

void FullRankForgetGate(const KdaDims& dims, const KdaFullRankGateWeights& w, const float* x,
                        int64_t rows, float* g) {
  kernels::Linear(x, rows, w.f, g);  // [rows, C] logits
  const std::optional<float> bound = w.safe_lower_bound;
  ApplyForgetGate(dims, w.a_log, w.dt_bias, rows, g, [bound](float rate, float z) {
    if (bound) return *bound * Sigmoid(rate * z);
    return -rate * (z > 20.0f ? z : std::log1p(std::exp(z)));  // torch's softplus (threshold 20)
  });
}

void KdaShortConv(const KdaDims& dims, const KdaWeights& w, const float* x, int64_t n,
                  float* conv_state, float* out) {
  const int64_t c = dims.channels(), width = 3 * c, taps = dims.conv_kernel, past = taps - 1;
  const float* weights[3] = {w.q_conv.data(), w.k_conv.data(), w.v_conv.data()};
  // window [past + n, 3C]: the previous inputs, then this call's.
  std::vector<float> window((past + n) * width);
  std::memcpy(window.data(), conv_state, past * width * sizeof(float));
  std::memcpy(window.data() + past * width, x, n * width * sizeof(float));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t ch = 0; ch < width; ++ch) {
      const float* kernel = weights[ch / c] + (ch % c) * taps;
      float acc = 0.0f;
      for (int64_t j = 0; j < taps; ++j) acc += kernel[j] * window[(t + j) * width + ch];
      out[t * width + ch] = acc * Sigmoid(acc);  // SiLU
    }
  }
  std::memcpy(conv_state, window.data() + n * width, past * width * sizeof(float));
}

void KdaNormalizeQk(const KdaDims& dims, float* q, float* k, int64_t n) {
  const int64_t d = dims.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (float* x : {q, k}) {
    for (int64_t i = 0; i < n * dims.heads; ++i) {
      float* v = x + i * d;
      float sum = 0.0f;
      for (int64_t j = 0; j < d; ++j) sum += v[j] * v[j];
      const float norm = std::sqrt(sum + 1e-6f);
      for (int64_t j = 0; j < d; ++j) v[j] /= norm;
      if (x == q) {
        for (int64_t j = 0; j < d; ++j) v[j] *= scale;
      }
    }
  }
}

void KdaRecurrent(const KdaDims& dims, const float* q, const float* k, const float* v,
                  int64_t stride, const float* g, const float* beta, int64_t n, float* state,
                  float* out) {
  const int64_t H = dims.heads, d = dims.head_dim, c = dims.channels();
  std::vector<float> mem(d);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      float* S = state + h * d * d;  // [dk, dv]
      const float* qt = q + t * stride + h * d;
      const float* kt = k + t * stride + h * d;
      const float* vt = v + t * stride + h * d;
      const float* gt = g + t * c + h * d;
      const float b = beta[t * H + h];
      for (int64_t i = 0; i < d; ++i) {
        const float decay = std::exp(gt[i]);
        for (int64_t e = 0; e < d; ++e) S[i * d + e] *= decay;
      }
      std::fill(mem.begin(), mem.end(), 0.0f);
      for (int64_t i = 0; i < d; ++i)
        for (int64_t e = 0; e < d; ++e) mem[e] += S[i * d + e] * kt[i];
      for (int64_t e = 0; e < d; ++e) mem[e] = (vt[e] - mem[e]) * b;  // delta
      for (int64_t i = 0; i < d; ++i)
        for (int64_t e = 0; e < d; ++e) S[i * d + e] += kt[i] * mem[e];
      float* o = out + t * c + h * d;
      std::fill(o, o + d, 0.0f);
      for (int64_t i = 0; i < d; ++i)
        for (int64_t e = 0; e < d; ++e) o[e] += S[i * d + e] * qt[i];
    }
  }
}

// Per head and row r of a chunk (0-based), with T the chunk's unit lower-triangular solve:
//   gcum_r = gcum_{r-1} + g_r
//   A[r][j] = -beta_r sum_c k_r[c] k_j[c] exp(gcum_r[c] - gcum_j[c])          (j < r)
//   T[r][j] = A[r][j] + sum_{l=j+1}^{r-1} A[r][l] T[l][j],  T[r][r] = 1
//   u_r = sum_{j<=r} T[r][j] beta_j v_j;  w_r = sum_{j<=r} T[r][j] beta_j exp(gcum_j) k_j
//   v_new_r = u_r - S0^T w_r
//   o_r = S0^T (exp(gcum_r) q_r) + sum_{j<=r} (sum_c q_r[c] k_j[c] exp(gcum_r[c] - gcum_j[c])) v_new_j
// and once the chunk is complete (last row L):
//   S = diag(exp(gcum_L)) S0 + sum_j (exp(gcum_L - gcum_j) k_j) v_new_j^T.
// This is transformers' chunk_kimi_delta_attention written per row: each row needs only the rows
// before it, so a chunk can be computed across calls without changing any value.
void KdaChunked(const KdaDims& dims, const float* q, const float* k, const float* v,
                int64_t stride, const float* g, const float* beta, int64_t n,
                int64_t first_position, float* state, float* block, float* out) {
  const int64_t H = dims.heads, d = dims.head_dim, c = dims.channels();
  const RowLayout L(d);
  std::vector<float> A(kKdaChunk), u(d), w(d), qg(d), decay(d);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t r = (first_position + t) % kKdaChunk;
    for (int64_t h = 0; h < H; ++h) {
      float* S = state + h * d * d;
      auto row = [&](int64_t j) { return block + (j * H + h) * L.size; };
      float* me = row(r);
      const float* qt = q + t * stride + h * d;
      const float* kt = k + t * stride + h * d;
      const float* vt = v + t * stride + h * d;
      const float* gt = g + t * c + h * d;
      const float b = beta[t * H + h];
      // Store this row's inputs.
      for (int64_t i = 0; i < d; ++i) {
        me[L.k + i] = kt[i];
        me[L.gcum + i] = (r == 0 ? 0.0f : row(r - 1)[L.gcum + i]) + gt[i];
        me[L.v + i] = vt[i];
      }
      me[L.beta] = b;
      const float* gr = me + L.gcum;
      // A row, then the solve row.
      for (int64_t j = 0; j < r; ++j) {
        const float* kj = row(j) + L.k;
        const float* gj = row(j) + L.gcum;
        float acc = 0.0f;
        for (int64_t i = 0; i < d; ++i) acc += b * kt[i] * kj[i] * std::exp(gr[i] - gj[i]);
        A[j] = -acc;
      }
      float* T = me + L.solve;
      for (int64_t j = 0; j < r; ++j) {
        float acc = A[j];
        for (int64_t l = j + 1; l < r; ++l) acc += A[l] * row(l)[L.solve + j];
        T[j] = acc;
      }
      T[r] = 1.0f;
      // u and w over rows j <= r.
      std::fill(u.begin(), u.end(), 0.0f);
      std::fill(w.begin(), w.end(), 0.0f);
      for (int64_t j = 0; j <= r; ++j) {
        const float* rj = row(j);
        const float tb = T[j] * rj[L.beta];
        for (int64_t e = 0; e < d; ++e) u[e] += tb * rj[L.v + e];
        for (int64_t i = 0; i < d; ++i) w[i] += tb * (rj[L.k + i] * std::exp(rj[L.gcum + i]));
      }
      // v_new = u - S0^T w; the inter-chunk output S0^T (exp(gcum) q).
      float* vn = me + L.v_new;
      float* o = out + t * c + h * d;
      for (int64_t i = 0; i < d; ++i) qg[i] = qt[i] * std::exp(gr[i]);
      std::fill(vn, vn + d, 0.0f);
      std::fill(o, o + d, 0.0f);
      for (int64_t i = 0; i < d; ++i) {
        const float* Si = S + i * d;
        for (int64_t e = 0; e < d; ++e) {
          vn[e] += w[i] * Si[e];
          o[e] += qg[i] * Si[e];
        }
      }
      for (int64_t e = 0; e < d; ++e) vn[e] = u[e] - vn[e];
      // The intra-chunk output.
      for (int64_t j = 0; j <= r; ++j) {
        const float* kj = row(j) + L.k;
        const float* gj = row(j) + L.gcum;
        float score = 0.0f;
        for (int64_t i = 0; i < d; ++i) score += qt[i] * kj[i] * std::exp(gr[i] - gj[i]);
        const float* vj = row(j) + L.v_new;
        for (int64_t e = 0; e < d; ++e) o[e] += score * vj[e];
      }
      if (r + 1 < kKdaChunk) continue;
      // The chunk is complete: move the state to its end.
      for (int64_t i = 0; i < d; ++i) decay[i] = std::exp(gr[i]);
      for (int64_t i = 0; i < d; ++i)
        for (int64_t e = 0; e < d; ++e) S[i * d + e] *= decay[i];
      for (int64_t j = 0; j < kKdaChunk; ++j) {
        const float* rj = row(j);
        for (int64_t i = 0; i < d; ++i) {
          const float kd = rj[L.k + i] * std::exp(gr[i] - rj[L.gcum + i]);
          for (int64_t e = 0; e < d; ++e) S[i * d + e] += kd * rj[L.v_new + e];
        }
      }
    }
  }
}

void KdaGatedNorm(const KdaDims& dims, const float* core, const float* gate, int64_t rows,
                  const NormWeight& o_norm, float eps, float* out) {
  const int64_t d = dims.head_dim;
  std::vector<float> weight(d);
  if (o_norm.dtype == DType::kF32) {
    std::memcpy(weight.data(), o_norm.data, d * sizeof(float));
  } else {
    for (int64_t i = 0; i < d; ++i) weight[i] = LoadAsF32(o_norm.data, o_norm.dtype, i);
  }
  for (int64_t i = 0; i < rows * dims.heads; ++i) {
    const float* x = core + i * d;
    float sum = 0.0f;
    for (int64_t j = 0; j < d; ++j) sum += x[j] * x[j];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(d) + eps);
    for (int64_t j = 0; j < d; ++j) out[i * d + j] = weight[j] * (x[j] * inv) * Sigmoid(gate[i * d + j]);
  }
}

}  // namespace latent::ops
