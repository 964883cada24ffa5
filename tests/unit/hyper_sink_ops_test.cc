// The shared blocks added for Hy4, each against a direct scalar evaluation of its formula:
// hyper-connection gates, collapse, expansion (with and without a comb mixing matrix), mHC's
// Sinkhorn-normalised comb and the mean collapse (GLM-5-Next), and the head's collapse (src/ops/hyper_connections); attention sinks in the attention kernels, the
// reference and the best one, single-query and multi-query (src/kernels/attention.h); the
// routed experts' clamped SwiGLU (src/ops/moe).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "base/error.h"
#include "kernels/kernel_table.h"
#include "ops/hyper_connections.h"
#include "ops/moe.h"
#include "random_test_util.h"

namespace latent {
namespace {

using test::Random;

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

ops::HyperConnectionDims Dims() {
  ops::HyperConnectionDims d;
  d.streams = 3;
  d.hidden = 5;
  d.norm_eps = 1e-5f;
  d.gate_eps = 1e-3f;  // visible in the result
  d.post_magnitude = 1.7f;
  return d;
}

// Per token, the unweighted RMS normaliser and mixes = fn . flat / rms, in double.
std::vector<double> ScalarMixes(const ops::HyperConnectionDims& d, const std::vector<float>& fn,
                                int64_t rows, const float* flat) {
  double sq = 0;
  for (int64_t i = 0; i < d.flat(); ++i) sq += double(flat[i]) * flat[i];
  const double inv = 1.0 / std::sqrt(sq / d.flat() + d.norm_eps);
  std::vector<double> mixes(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0;
    for (int64_t i = 0; i < d.flat(); ++i) dot += double(fn[r * d.flat() + i]) * flat[i];
    mixes[r] = dot * inv;
  }
  return mixes;
}

TEST(HyperConnectionsTest, GatesCollapseAndExpandMatchTheFormulas) {
  const ops::HyperConnectionDims d = Dims();
  const int64_t tokens = 4, n = d.streams;
  ops::HyperConnectionWeights w;
  w.fn = Random(2 * n * d.flat(), 1, 0.5f);
  w.base = Random(2 * n, 2);
  w.scale = {1.3f, 0.7f};
  const std::vector<float> streams = Random(tokens * d.flat(), 3);
  const std::vector<float> branch = Random(tokens * d.hidden, 4);

  const ops::HyperGates g = ops::ComputeHyperGates(d, w, streams.data(), tokens);
  ASSERT_EQ(g.pre.size(), static_cast<size_t>(tokens * n));
  EXPECT_TRUE(g.comb.empty());
  std::vector<float> x(tokens * d.hidden);
  ops::CollapseStreams(d, g.pre.data(), streams.data(), tokens, x.data());
  std::vector<float> expanded = streams;
  ops::ExpandStreams(d, g, branch.data(), tokens, expanded.data());

  for (int64_t t = 0; t < tokens; ++t) {
    const float* flat = &streams[t * d.flat()];
    const std::vector<double> mixes = ScalarMixes(d, w.fn, 2 * n, flat);
    for (int64_t i = 0; i < n; ++i) {
      const double pre = Sigmoid(mixes[i] * w.scale[0] + w.base[i]) + d.gate_eps;
      const double post = d.post_magnitude * Sigmoid(mixes[n + i] * w.scale[1] + w.base[n + i]) + d.gate_eps;
      EXPECT_NEAR(g.pre[t * n + i], pre, 1e-5) << "token " << t << " stream " << i;
      EXPECT_NEAR(g.post[t * n + i], post, 1e-5) << "token " << t << " stream " << i;
      for (int64_t c = 0; c < d.hidden; ++c) {
        const double want = post * branch[t * d.hidden + c] + flat[i * d.hidden + c];
        EXPECT_NEAR(expanded[t * d.flat() + i * d.hidden + c], want, 1e-5);
      }
    }
    for (int64_t c = 0; c < d.hidden; ++c) {
      double want = 0;
      for (int64_t i = 0; i < n; ++i) {
        want += (Sigmoid(mixes[i] * w.scale[0] + w.base[i]) + d.gate_eps) * flat[i * d.hidden + c];
      }
      EXPECT_NEAR(x[t * d.hidden + c], want, 1e-5) << "token " << t << " channel " << c;
    }
  }
}

TEST(HyperConnectionsTest, ExpandMixesTheResidualsWithComb) {
  // The mHC residual sum_m comb[m][n] * stream[m] (the hook for Sinkhorn-normalised mixing).
  const ops::HyperConnectionDims d = Dims();
  const int64_t tokens = 2, n = d.streams;
  ops::HyperGates g;
  g.pre = Random(tokens * n, 5);
  g.post = Random(tokens * n, 6);
  g.comb = Random(tokens * n * n, 7);
  const std::vector<float> streams = Random(tokens * d.flat(), 8);
  const std::vector<float> branch = Random(tokens * d.hidden, 9);
  std::vector<float> out = streams;
  ops::ExpandStreams(d, g, branch.data(), tokens, out.data());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < d.hidden; ++c) {
        double want = double(g.post[t * n + i]) * branch[t * d.hidden + c];
        for (int64_t m = 0; m < n; ++m)
          want += double(g.comb[(t * n + m) * n + i]) * streams[t * d.flat() + m * d.hidden + c];
        EXPECT_NEAR(out[t * d.flat() + i * d.hidden + c], want, 1e-5);
      }
}

TEST(HyperConnectionsTest, HeadCollapseAndBroadcast) {
  const ops::HyperConnectionDims d = Dims();
  const int64_t tokens = 3, n = d.streams;
  ops::HyperHeadWeights w;
  w.fn = Random(n * d.flat(), 10, 0.5f);
  w.base = Random(n, 11);
  w.scale = {0.9f};
  const std::vector<float> streams = Random(tokens * d.flat(), 12);
  std::vector<float> x(tokens * d.hidden);
  ops::HyperHeadCollapse(d, w, streams.data(), tokens, x.data());
  for (int64_t t = 0; t < tokens; ++t) {
    const float* flat = &streams[t * d.flat()];
    const std::vector<double> mixes = ScalarMixes(d, w.fn, n, flat);
    for (int64_t c = 0; c < d.hidden; ++c) {
      double want = 0;
      for (int64_t i = 0; i < n; ++i)
        want += (Sigmoid(mixes[i] * w.scale[0] + w.base[i]) + d.gate_eps) * flat[i * d.hidden + c];
      EXPECT_NEAR(x[t * d.hidden + c], want, 1e-5);
    }
  }
  std::vector<float> wide(tokens * d.flat());
  ops::BroadcastStreams(d, x.data(), tokens, wide.data());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < d.hidden; ++c)
        EXPECT_EQ(wide[t * d.flat() + i * d.hidden + c], x[t * d.hidden + c]);
}

// mHC (GLM-5-Next, DeepSeek V4): comb from softmax rows + eps, then Sinkhorn's alternating
// column and row normalisation, each with eps in the denominator, against a scalar evaluation
// in double; post without gate_eps; the result is doubly stochastic (to the eps floors).
std::vector<double> ScalarSinkhorn(std::vector<double> logits, int64_t n, double eps, int64_t iters) {
  for (int64_t r = 0; r < n; ++r) {
    double top = -1e300, sum = 0;
    for (int64_t c = 0; c < n; ++c) top = std::max(top, logits[r * n + c]);
    for (int64_t c = 0; c < n; ++c) sum += std::exp(logits[r * n + c] - top);
    for (int64_t c = 0; c < n; ++c) logits[r * n + c] = std::exp(logits[r * n + c] - top) / sum + eps;
  }
  auto normalize = [&](bool rows) {
    for (int64_t a = 0; a < n; ++a) {
      double sum = 0;
      for (int64_t b = 0; b < n; ++b) sum += rows ? logits[a * n + b] : logits[b * n + a];
      for (int64_t b = 0; b < n; ++b) (rows ? logits[a * n + b] : logits[b * n + a]) /= sum + eps;
    }
  };
  normalize(false);
  for (int64_t i = 0; i + 1 < iters; ++i) {
    normalize(true);
    normalize(false);
  }
  return logits;
}

TEST(HyperConnectionsTest, SinkhornMixingMatchesTheFormulas) {
  ops::HyperConnectionDims d = Dims();
  d.streams = 4;
  d.mix_streams = true;
  d.post_gate_eps = false;
  d.post_magnitude = 2.0f;
  d.sinkhorn_iters = 20;
  d.gate_eps = 1e-6f;
  const int64_t tokens = 3, n = d.streams, rows = d.gate_rows();
  ASSERT_EQ(rows, 2 * n + n * n);
  ops::HyperConnectionWeights w;
  w.fn = Random(rows * d.flat(), 11, 0.5f);
  w.base = Random(rows, 12, 0.5f);
  w.scale = {1.1f, 0.9f, 1.3f};
  const std::vector<float> streams = Random(tokens * d.flat(), 13);
  const ops::HyperGates g = ops::ComputeHyperGates(d, w, streams.data(), tokens);
  ASSERT_EQ(g.comb.size(), static_cast<size_t>(tokens * n * n));
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<double> m = ScalarMixes(d, w.fn, rows, &streams[t * d.flat()]);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(g.pre[t * n + i], Sigmoid(m[i] * 1.1 + w.base[i]) + 1e-6, 1e-5);
      EXPECT_NEAR(g.post[t * n + i], 2.0 * Sigmoid(m[n + i] * 0.9 + w.base[n + i]), 1e-5);
    }
    std::vector<double> logits(n * n);
    for (int64_t i = 0; i < n * n; ++i) logits[i] = m[2 * n + i] * 1.3 + w.base[2 * n + i];
    const std::vector<double> comb = ScalarSinkhorn(logits, n, 1e-6, 20);
    for (int64_t i = 0; i < n * n; ++i) EXPECT_NEAR(g.comb[t * n * n + i], comb[i], 1e-5) << i;
    for (int64_t a = 0; a < n; ++a) {
      double row = 0, column = 0;
      for (int64_t b = 0; b < n; ++b) {
        row += g.comb[t * n * n + a * n + b];
        column += g.comb[t * n * n + b * n + a];
      }
      EXPECT_NEAR(row, 1.0, 1e-3);
      EXPECT_NEAR(column, 1.0, 1e-4);
    }
  }
  // One Sinkhorn iteration: only the first column normalisation, so rows need not sum to 1.
  d.sinkhorn_iters = 1;
  std::vector<float> one = {0.0f, 1.0f, 2.0f, 3.0f, 3.0f, 0.0f, 1.0f, 2.0f,
                            2.0f, 3.0f, 0.0f, 1.0f, 0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<double> expect = ScalarSinkhorn(std::vector<double>(one.begin(), one.end()), n, 1e-6, 1);
  ops::SinkhornNormalize(d, one.data());
  for (int64_t i = 0; i < n * n; ++i) EXPECT_NEAR(one[i], expect[i], 1e-6);
}

TEST(HyperConnectionsTest, MeanCollapseAveragesTheStreams) {
  ops::HyperConnectionDims d = Dims();
  const int64_t tokens = 2;
  const std::vector<float> streams = Random(tokens * d.flat(), 21);
  std::vector<float> x(tokens * d.hidden);
  ops::MeanCollapseStreams(d, streams.data(), tokens, x.data());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < d.hidden; ++c) {
      double sum = 0;
      for (int64_t i = 0; i < d.streams; ++i) sum += streams[t * d.flat() + i * d.hidden + c];
      EXPECT_NEAR(x[t * d.hidden + c], sum / d.streams, 1e-6);
    }
}

// out [H, dv] of softmax over [q.k * scale for each position, sinks[h]] with the sink's value 0,
// in double.
std::vector<double> ScalarSinkAttention(const std::vector<float>& q, const std::vector<float>& keys,
                                        const std::vector<float>& values, int64_t heads, int64_t dq,
                                        int64_t dv, int64_t length, float scale, const float* sinks) {
  std::vector<double> out(heads * dv, 0.0);
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> s(length);
    double mx = sinks ? sinks[h] : -INFINITY;
    for (int64_t t = 0; t < length; ++t) {
      double dot = 0;
      for (int64_t i = 0; i < dq; ++i) dot += double(q[h * dq + i]) * keys[(t * heads + h) * dq + i];
      s[t] = dot * scale;
      mx = std::max(mx, s[t]);
    }
    double z = sinks ? std::exp(sinks[h] - mx) : 0.0;
    for (double& v : s) z += (v = std::exp(v - mx));
    for (int64_t t = 0; t < length; ++t)
      for (int64_t c = 0; c < dv; ++c) out[h * dv + c] += s[t] / z * values[(t * heads + h) * dv + c];
  }
  return out;
}

TEST(AttentionSinkTest, KernelsAddTheSinkToTheDenominator) {
  const int64_t heads = 11, dq = 20, dv = 18;  // heads past one group of 8, odd dims
  const float scale = 0.3f;
  const std::vector<float> sinks = Random(heads, 20, 2.0f);
  for (int64_t length : {int64_t{1}, int64_t{7}, int64_t{130}, int64_t{1100}}) {  // 1100: segments
    const std::vector<float> q = Random(heads * dq, 21);
    const std::vector<float> keys = Random(length * heads * dq, 22);
    const std::vector<float> values = Random(length * heads * dv, 23);
    std::vector<const void*> key_ptrs(length), value_ptrs(length);
    for (int64_t t = 0; t < length; ++t) {
      key_ptrs[t] = &keys[t * heads * dq];
      value_ptrs[t] = &values[t * heads * dv];
    }
    for (const bool with_sinks : {false, true}) {
      const float* s = with_sinks ? sinks.data() : nullptr;
      const std::vector<double> want =
          ScalarSinkAttention(q, keys, values, heads, dq, dv, length, scale, s);
      for (const kernels::KernelTable* table : {&kernels::RefKernels(), &kernels::BestKernels()}) {
        kernels::AttentionArgs a;
        a.q = q.data();
        a.num_heads = heads;
        a.qk_dim = dq;
        a.keys = key_ptrs.data();
        a.key_head_stride = dq;
        a.values = value_ptrs.data();
        a.value_head_stride = dv;
        a.v_dim = dv;
        a.length = length;
        a.scale = scale;
        a.sinks = s;
        std::vector<float> out(heads * dv), scratch(length);
        a.out = out.data();
        a.scratch = scratch.data();
        table->attention(a);
        for (int64_t i = 0; i < heads * dv; ++i)
          ASSERT_NEAR(out[i], want[i], 1e-5) << "length " << length << " sinks " << with_sinks << " at " << i;
        // The multi-query kernel: the last query attends all positions, another a prefix.
        const int64_t prefix = (length + 1) / 2;
        std::vector<float> qs(2 * heads * dq), outs(2 * heads * dv);
        std::copy(q.begin(), q.end(), qs.begin());
        std::copy(q.begin(), q.end(), qs.begin() + heads * dq);
        const int64_t lengths[2] = {prefix, length};
        kernels::QueriesAttentionArgs qa;
        qa.shared = a;
        qa.num_queries = 2;
        qa.q = qs.data();
        qa.lengths = lengths;
        qa.out = outs.data();
        table->attention_queries(qa);
        const std::vector<double> want_prefix =
            ScalarSinkAttention(q, keys, values, heads, dq, dv, prefix, scale, s);
        for (int64_t i = 0; i < heads * dv; ++i) {
          ASSERT_NEAR(outs[i], want_prefix[i], 1e-5) << "queries, prefix " << prefix << " at " << i;
          ASSERT_NEAR(outs[heads * dv + i], want[i], 1e-5) << "queries, length " << length << " at " << i;
        }
      }
    }
  }
}

TEST(AttentionSinkTest, SharedHeadLatentRows) {
  // The absorbed MLA form: one shared key/value row per position (head stride 0), values the
  // row's first dv values; the sink rescales each head's output the same way.
  const int64_t heads = 9, row = 24, dv = 16, length = 70;
  const float scale = 0.2f;
  const std::vector<float> sinks = Random(heads, 30, 2.0f);
  const std::vector<float> q = Random(heads * row, 31);
  const std::vector<float> rows = Random(length * row, 32);
  std::vector<const void*> ptrs(length);
  for (int64_t t = 0; t < length; ++t) ptrs[t] = &rows[t * row];
  std::vector<float> keys(length * heads * row), values(length * heads * dv);  // per head copies
  for (int64_t t = 0; t < length; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      std::copy(&rows[t * row], &rows[(t + 1) * row], &keys[(t * heads + h) * row]);
      std::copy(&rows[t * row], &rows[t * row + dv], &values[(t * heads + h) * dv]);
    }
  const std::vector<double> want =
      ScalarSinkAttention(q, keys, values, heads, row, dv, length, scale, sinks.data());
  for (const kernels::KernelTable* table : {&kernels::RefKernels(), &kernels::BestKernels()}) {
    kernels::AttentionArgs a;
    a.q = q.data();
    a.num_heads = heads;
    a.qk_dim = row;
    a.keys = ptrs.data();
    a.values = ptrs.data();
    a.v_dim = dv;
    a.length = length;
    a.scale = scale;
    a.sinks = sinks.data();
    std::vector<float> out(heads * dv), scratch(length);
    a.out = out.data();
    a.scratch = scratch.data();
    table->attention(a);
    for (int64_t i = 0; i < heads * dv; ++i) ASSERT_NEAR(out[i], want[i], 1e-5) << i;
  }
}

TEST(ClampedSwigluTest, RoutedExpertsClampGateAndUp) {
  const int64_t tokens = 5, d = 6, inter = 7;
  const float limit = 0.6f;
  const std::vector<float> gate = Random(inter * d, 40), up = Random(inter * d, 41),
                           down = Random(d * inter, 42), x = Random(tokens * d, 43, 2.0f);
  ops::MlpWeights w;
  w.gate = {gate.data(), DType::kF32, inter, d};
  w.up = {up.data(), DType::kF32, inter, d};
  w.down = {down.data(), DType::kF32, d, inter};
  std::vector<float> out(tokens * d), plain(tokens * d);
  ops::MlpForward(w, x.data(), tokens, out.data(), limit);
  ops::MlpForward(w, x.data(), tokens, plain.data());
  bool clamped_somewhere = false;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> h(inter);
    for (int64_t j = 0; j < inter; ++j) {
      double g = 0, u = 0;
      for (int64_t i = 0; i < d; ++i) {
        g += double(gate[j * d + i]) * x[t * d + i];
        u += double(up[j * d + i]) * x[t * d + i];
      }
      clamped_somewhere = clamped_somewhere || g > limit || std::abs(u) > limit;
      g = std::min<double>(g, limit);
      u = std::clamp<double>(u, -limit, limit);
      h[j] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int64_t i = 0; i < d; ++i) {
      double want = 0;
      for (int64_t j = 0; j < inter; ++j) want += double(down[i * inter + j]) * h[j];
      EXPECT_NEAR(out[t * d + i], want, 1e-5) << "token " << t << " channel " << i;
    }
  }
  EXPECT_TRUE(clamped_somewhere);
  EXPECT_NE(out, plain);
}

}  // namespace
}  // namespace latent
