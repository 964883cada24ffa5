// The KDA kernels against each other: the chunked prefill kernel equals the token-by-token
// recurrence (to f32 rounding), and gives bit-identical outputs however a sequence's tokens are
// split across calls (chunked prefill, decode), which the engine's batching invariance needs.
// Also the forget gate forms the families add (bailing_hybrid's full-rank safe gate).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "ops/kda.h"

namespace latent::ops {
namespace {

struct Inputs {
  KdaDims dims;
  int64_t n;
  std::vector<float> qkv, g, beta;  // qkv [n, 3C], g [n, C], beta [n, H]
};

// Log-decays g in [-max_decay, 0] (skewed towards 0); bailing_hybrid's safe gate reaches -5.
Inputs MakeInputs(int64_t heads, int64_t d, int64_t n, uint32_t seed, float max_decay = 0.3f) {
  Inputs in{{heads, d, 4}, n, {}, {}, {}};
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const int64_t c = in.dims.channels();
  in.qkv.resize(n * 3 * c);
  for (float& x : in.qkv) x = normal(gen);
  in.g.resize(n * c);
  for (float& x : in.g) x = -max_decay * unit(gen) * unit(gen);  // decays from 1 to exp(-max)
  in.beta.resize(n * heads);
  for (float& x : in.beta) x = unit(gen);
  // q and k of each token normalised in place (the kernels take prepared q, k).
  std::vector<float> q(n * c), k(n * c);
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(&in.qkv[t * 3 * c], c, &q[t * c]);
    std::copy_n(&in.qkv[t * 3 * c + c], c, &k[t * c]);
  }
  KdaNormalizeQk(in.dims, q.data(), k.data(), n);
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(&q[t * c], c, &in.qkv[t * 3 * c]);
    std::copy_n(&k[t * c], c, &in.qkv[t * 3 * c + c]);
  }
  return in;
}

std::vector<float> Recurrent(const Inputs& in, std::vector<float>& state) {
  const int64_t c = in.dims.channels();
  std::vector<float> out(in.n * c);
  state.assign(in.dims.state_values(), 0.0f);
  KdaRecurrent(in.dims, in.qkv.data(), in.qkv.data() + c, in.qkv.data() + 2 * c, 3 * c, in.g.data(),
               in.beta.data(), in.n, state.data(), out.data());
  return out;
}

// The chunked kernel over the tokens in calls of `split` tokens (0: one call).
std::vector<float> Chunked(const Inputs& in, int64_t split, std::vector<float>& state) {
  const int64_t c = in.dims.channels(), H = in.dims.heads;
  std::vector<float> out(in.n * c);
  state.assign(in.dims.state_values(), 0.0f);
  std::vector<float> block(in.dims.block_values(), std::nanf(""));  // never read before written
  const int64_t step = split > 0 ? split : in.n;
  for (int64_t start = 0; start < in.n; start += step) {
    const int64_t count = std::min(step, in.n - start);
    const float* qkv = in.qkv.data() + start * 3 * c;
    KdaChunked(in.dims, qkv, qkv + c, qkv + 2 * c, 3 * c, in.g.data() + start * c,
               in.beta.data() + start * H, count, start, state.data(), block.data(),
               out.data() + start * c);
  }
  return out;
}

TEST(KdaKernelsTest, ChunkedEqualsTheRecurrence) {
  for (int64_t n : {1, 7, 64, 130, 300}) {
    const Inputs in = MakeInputs(3, 16, n, static_cast<uint32_t>(n));
    std::vector<float> s_ref, s_chunk;
    const std::vector<float> ref = Recurrent(in, s_ref);
    const std::vector<float> got = Chunked(in, 0, s_chunk);
    float max_ref = 0, err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      max_ref = std::max(max_ref, std::abs(ref[i]));
      err = std::max(err, std::abs(ref[i] - got[i]));
    }
    EXPECT_LE(err, 1e-5f * max_ref) << n << " tokens";
    if (n % kKdaChunk == 0) {  // The chunked state is the state at the chunk's end.
      float state_err = 0, state_max = 0;
      for (size_t i = 0; i < s_ref.size(); ++i) {
        state_max = std::max(state_max, std::abs(s_ref[i]));
        state_err = std::max(state_err, std::abs(s_ref[i] - s_chunk[i]));
      }
      EXPECT_LE(state_err, 1e-5f * state_max) << n << " tokens";
    }
  }
}

// The safe gate's decays reach exp(-5) per token, so a chunk's cumulative decay underflows f32
// (exp(-320)); the chunked form must still equal the recurrence, as transformers' does.
TEST(KdaKernelsTest, ChunkedEqualsTheRecurrenceUnderStrongDecays) {
  for (int64_t n : {7, 64, 200}) {
    const Inputs in = MakeInputs(2, 12, n, static_cast<uint32_t>(n) + 5, 5.0f);
    std::vector<float> s_ref, s_chunk;
    const std::vector<float> ref = Recurrent(in, s_ref);
    const std::vector<float> got = Chunked(in, 0, s_chunk);
    float max_ref = 0, err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << n << " tokens, value " << i;
      max_ref = std::max(max_ref, std::abs(ref[i]));
      err = std::max(err, std::abs(ref[i] - got[i]));
    }
    EXPECT_LE(err, 1e-5f * max_ref) << n << " tokens";
  }
}

// bailing_hybrid's full-rank forget gate against its formula: z = f x + dt_bias, then
// b * sigmoid(exp(A_log_h) z) (safe, within [b, 0]) or -exp(A_log_h) softplus(z).
TEST(KdaKernelsTest, FullRankForgetGateForms) {
  const KdaDims dims{2, 3, 4};
  const int64_t c = dims.channels(), D = 5, rows = 4;
  std::mt19937 gen(11);
  std::normal_distribution<float> normal;
  std::vector<float> f(c * D), x(rows * D);
  for (float& v : f) v = 2.0f * normal(gen);
  for (float& v : x) v = normal(gen);
  KdaFullRankGateWeights w;
  w.f = kernels::WeightRef{f.data(), DType::kF32, c, D};
  w.dt_bias = {-4.0f, -2.0f, 0.5f, 1.0f, -6.0f, 30.0f};  // 30: softplus's linear branch
  w.a_log = {std::log(2.0f), std::log(9.0f)};
  for (const std::optional<float> bound : {std::optional<float>(-5.0f), std::optional<float>()}) {
    w.safe_lower_bound = bound;
    std::vector<float> g(rows * c);
    FullRankForgetGate(dims, w, x.data(), rows, g.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t ch = 0; ch < c; ++ch) {
        double z = w.dt_bias[ch];
        for (int64_t i = 0; i < D; ++i) z += static_cast<double>(f[ch * D + i]) * x[r * D + i];
        const double rate = std::exp(static_cast<double>(w.a_log[ch / dims.head_dim]));
        const double want = bound ? *bound / (1.0 + std::exp(-rate * z))
                                  : -rate * (z > 20 ? z : std::log1p(std::exp(z)));
        EXPECT_NEAR(g[r * c + ch], want, 1e-5 * std::max(1.0, std::abs(want)))
            << (bound ? "safe" : "softplus") << " row " << r << " channel " << ch;
        if (bound) {
          EXPECT_TRUE(g[r * c + ch] >= *bound && g[r * c + ch] <= 0.0f);
        }
      }
    }
  }
}

TEST(KdaKernelsTest, ChunkedIsBitIdenticalHoweverTheTokensAreSplit) {
  const Inputs in = MakeInputs(2, 8, 200, 42);
  std::vector<float> s_once, s_split;
  const std::vector<float> once = Chunked(in, 0, s_once);
  for (int64_t split : {1, 7, 64, 100}) {
    EXPECT_EQ(Chunked(in, split, s_split), once) << "calls of " << split << " tokens";
    EXPECT_EQ(s_split, s_once) << "calls of " << split << " tokens";
  }
}

TEST(KdaKernelsTest, ShortConvContinuesAcrossCalls) {
  KdaDims dims{1, 2, 4};
  KdaWeights w;
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  for (auto* conv : {&w.q_conv, &w.k_conv, &w.v_conv}) {
    conv->resize(dims.channels() * dims.conv_kernel);
    for (float& x : *conv) x = normal(gen);
  }
  const int64_t n = 9, width = 3 * dims.channels();
  std::vector<float> x(n * width);
  for (float& v : x) v = normal(gen);
  std::vector<float> state(dims.conv_values(), 0.0f), once(n * width), split(n * width);
  KdaShortConv(dims, w, x.data(), n, state.data(), once.data());
  std::fill(state.begin(), state.end(), 0.0f);
  for (int64_t t = 0; t < n; t += 2) {
    const int64_t count = std::min<int64_t>(2, n - t);
    KdaShortConv(dims, w, x.data() + t * width, count, state.data(), split.data() + t * width);
  }
  EXPECT_EQ(split, once);
  // Token 0 of channel 0 sees only itself (zero history): silu(w[K-1] * x).
  const float z = w.q_conv[dims.conv_kernel - 1] * x[0];
  EXPECT_FLOAT_EQ(once[0], z / (1.0f + std::exp(-z)));
}

}  // namespace
}  // namespace latent::ops
