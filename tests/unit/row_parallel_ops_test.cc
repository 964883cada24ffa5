// The row-wise ops share a prefill's rows out over the threads (threads::ParallelRows): RMSNorm
// and the MLP's SwiGLU must give the bits of one kernel call over all the rows, whatever the
// thread count and wherever the chunks fall.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/kernel_table.h"
#include "kernels/linear.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "threads/thread_pool.h"

namespace latent {
namespace {

std::vector<float> Normal(int64_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

class RowParallelOps : public ::testing::Test {
 protected:
  void TearDown() override { threads::SetNumThreads(saved_threads_); }

 private:
  int saved_threads_ = threads::NumThreads();
};

TEST_F(RowParallelOps, RmsNormGivesOneKernelCallsBits) {
  // 300 rows of 512: chunks of 64 rows (the last one short), out of place and in place.
  const int64_t rows = 300, d = 512;
  const std::vector<float> x = Normal(rows * d, 1), weight = Normal(d, 2);
  std::vector<float> expected(rows * d);
  kernels::BestKernels().rms_norm(x.data(), rows, d, weight.data(), DType::kF32, 1e-6f,
                                  expected.data());
  for (int threads : {1, 2, 3}) {
    threads::SetNumThreads(threads);
    std::vector<float> out(rows * d), in_place = x;
    ops::RmsNorm(x.data(), rows, d, {weight.data(), DType::kF32}, 1e-6f, out.data());
    ops::RmsNorm(in_place.data(), rows, d, {weight.data(), DType::kF32}, 1e-6f, in_place.data());
    for (int64_t i = 0; i < rows * d; ++i) {
      ASSERT_EQ(out[i], expected[i]) << threads << " threads, at " << i;
      ASSERT_EQ(in_place[i], expected[i]) << threads << " threads, in place, at " << i;
    }
  }
}

TEST_F(RowParallelOps, MlpGivesTheBitsOfOneSwigluCallOverAllRows) {
  // 200 tokens through an intermediate of 700 (not a multiple of 8): SwiGLU chunks of 47 rows.
  const int64_t tokens = 200, hidden = 24, inter = 700;
  std::vector<float> gate_w = Normal(inter * hidden, 3, 0.3f), up_w = Normal(inter * hidden, 4),
                     down_w = Normal(hidden * inter, 5, 0.1f), x = Normal(tokens * hidden, 6);
  const ops::MlpWeights w{{gate_w.data(), DType::kF32, inter, hidden},
                          {up_w.data(), DType::kF32, inter, hidden},
                          {down_w.data(), DType::kF32, hidden, inter}};
  threads::SetNumThreads(1);
  std::vector<float> gate(tokens * inter), up(tokens * inter), expected(tokens * hidden);
  kernels::Linear(x.data(), tokens, w.gate, gate.data());
  kernels::Linear(x.data(), tokens, w.up, up.data());
  kernels::BestKernels().silu_mul(gate.data(), up.data(), tokens * inter, gate.data());
  kernels::Linear(gate.data(), tokens, w.down, expected.data());
  for (int threads : {1, 2, 3}) {
    threads::SetNumThreads(threads);
    std::vector<float> out(tokens * hidden);
    ops::MlpForward(w, x.data(), tokens, out.data());
    for (int64_t i = 0; i < tokens * hidden; ++i)
      ASSERT_EQ(out[i], expected[i]) << threads << " threads, at " << i;
  }
}

}  // namespace
}  // namespace latent
