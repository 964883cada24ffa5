// Helpers shared by the kernel tests: restoring the thread count, random test data.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_table.h"
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

// n floats drawn uniformly from [lo, hi).
inline std::vector<float> RandomFloats(std::mt19937& rng, int64_t n, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
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

}  // namespace latent::kernels::testing

// In a FastTable-parametrized test: binds `name` to the family's table, or skips the test on a
// CPU without that family (naming what is missing): each ISA's tests run where the CPU has it.
#define LATENT_REQUIRE_TABLE(name)                                     \
  if (GetParam().get() == nullptr) GTEST_SKIP() << GetParam().missing; \
  const ::latent::kernels::KernelTable& name = *GetParam().get()
