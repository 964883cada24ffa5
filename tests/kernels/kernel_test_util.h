// Helpers shared by the kernel tests: restoring the thread count, random test data.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/error.h"
#include "kernels/kernel_table.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

namespace latent::kernels::testing {

// Restores the process-wide thread count after a test changes it.
class ThreadCount {
 public:
  ThreadCount() : saved_(threads::NumThreads()) {}
  ~ThreadCount() { threads::SetNumThreads(saved_); }

 private:
  int saved_;
};

// LATENT_BF16_DOT and LATENT_KERNELS=ref as the kernel choice reads them (dispatch.cc).
inline bool Bf16DotAsked() { return EnvBool("LATENT_BF16_DOT").value_or(false); }
inline bool RefForced() { return EnvChoice("LATENT_KERNELS", {"ref"}).has_value(); }

// n floats drawn uniformly from [lo, hi).
inline std::vector<float> RandomFloats(std::mt19937& rng, int64_t n, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// table.linear(x [m, w.k]) -> y [m, w.n] (filled with -7 first: every output must be written).
inline std::vector<float> RunLinear(const KernelTable& table, const std::vector<float>& x,
                                    int64_t m, const WeightRef& w) {
  std::vector<float> y(m * w.n, -7.0f), scratch(w.k);
  table.linear(x.data(), m, w, y.data(), scratch.data());
  return y;
}

// table.linear of each of x's m rows alone (m = 1 calls), stacked: [m, w.n]. What a batch's rows
// must equal bit for bit in the batch-invariance tests.
inline std::vector<float> RunEachRowAlone(const KernelTable& table, const std::vector<float>& x,
                                          int64_t m, const WeightRef& w) {
  std::vector<float> alone(m * w.n);
  for (int64_t i = 0; i < m; ++i) {
    const std::vector<float> xi(x.begin() + i * w.k, x.begin() + (i + 1) * w.k);
    const std::vector<float> yi = RunLinear(table, xi, 1, w);
    std::copy(yi.begin(), yi.end(), alone.begin() + i * w.n);
  }
  return alone;
}

// y (a bf16-compute linear of x over w) against the reference within the summation bound. Both
// sum k products of the same bf16-rounded inputs in f32 (products of bf16 values are exact in
// f32, and these are far from denormal), each in its own order and with `extra_roundings` more
// roundings per output (the fp8 kernel's block scales), so each lies within
// (k + extra_roundings) u sum |x_c w_c| of the exact sum (u = 2^-24) and they differ by at most
// twice that.
inline void ExpectWithinSummationBound(const std::vector<float>& x, int64_t m, const WeightRef& w,
                                       const std::vector<float>& y, int64_t extra_roundings) {
  const std::vector<float> ref = RunLinear(RefKernels(), x, m, w);
  std::vector<float> row(w.k);
  for (int64_t r = 0; r < w.n; ++r) {
    RefKernels().dequant_row(w, r, row.data());
    for (int64_t i = 0; i < m; ++i) {
      double magnitude = 0.0;
      for (int64_t c = 0; c < w.k; ++c) {
        magnitude += std::fabs(static_cast<double>(RoundToBF16(x[i * w.k + c])) * row[c]);
      }
      const double bound =
          2.0 * static_cast<double>(w.k + extra_roundings) * std::ldexp(1.0, -24) * magnitude;
      ASSERT_LE(std::fabs(static_cast<double>(y[i * w.n + r]) - ref[i * w.n + r]), bound)
          << "m " << m << " row " << i << " output " << r << " of [" << w.n << ", " << w.k << "]";
    }
  }
}

// One fast kernel family for the value-parametrized tests: its table (null when this CPU lacks
// it: the test skips, naming what is missing).
struct FastTable {
  const char* name;
  const KernelTable* (*get)();
  const char* missing;
};

// The test-name suffix (INSTANTIATE_TEST_SUITE_P's name generator): Isa/FastKernels.X/avx2.
inline std::string FastTableName(const ::testing::TestParamInfo<FastTable>& info) {
  return info.param.name;
}

// How gtest prints the parameter (--gtest_list_tests' "GetParam() = avx2", failure messages,
// and so the names ctest's test discovery reads): the family's name, not the struct's raw bytes.
inline void PrintTo(const FastTable& table, std::ostream* os) { *os << table.name; }

// The fast families most suites run over (a suite adds its own, e.g. ref or VNNI, beside them).
inline FastTable Avx512Table() { return {"avx512", Avx512Kernels, "no AVX-512 on this CPU"}; }
inline FastTable Avx2Table() {
  return {"avx2", Avx2Kernels, "no AVX2 + FMA + F16C (or no OS ymm state) on this CPU"};
}

// Runs call(), which must throw latent::Error with `part` in its message (the packed-layout
// checks: kernels/weight_ref.h).
template <class Call>
void ExpectErrorNaming(Call&& call, const std::string& part) {
  try {
    call();
    ADD_FAILURE() << "no error naming \"" << part << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace latent::kernels::testing

// In a FastTable-parametrized test: binds `name` to the family's table, or skips the test on a
// CPU without that family (naming what is missing): each ISA's tests run where the CPU has it.
#define LATENT_REQUIRE_TABLE(name)                                     \
  if (GetParam().get() == nullptr) GTEST_SKIP() << GetParam().missing; \
  const ::latent::kernels::KernelTable& name = *GetParam().get()
