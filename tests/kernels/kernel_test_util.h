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

}  // namespace latent::kernels::testing
