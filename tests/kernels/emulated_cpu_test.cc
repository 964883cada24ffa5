// The CPU the emulated build presents (LATENT_EMULATED_CPU, base/cpu_features.h) and the kernels
// dispatch picks for it: AMX by default, the vdpbf16ps packed kernels on Zen 4/5, the row-major
// AVX-512 kernels with VNNI on Cascade and Ice Lake and without it on Skylake-SP. ctest runs this
// at every level (tests/kernels/CMakeLists.txt, emulated_avx512.kernel_dispatch_on_*); without
// it, a level that was ignored would still pass the other dispatch tests, which only check that
// the choice follows whatever tables exist.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/cpu_features.h"
#include "kernels/kernel_table.h"

namespace latent::kernels {
namespace {

TEST(EmulatedCpu, DispatchPicksTheKernelsOfTheCpuPresented) {
  if (!CpuHasAvx2()) GTEST_SKIP() << "the emulation needs AVX2";
  if (std::getenv("LATENT_GEMM") != nullptr || std::getenv("LATENT_KERNELS") != nullptr) {
    GTEST_SKIP() << "LATENT_GEMM or LATENT_KERNELS overrides the choice";
  }
  const char* cpu_env = std::getenv("LATENT_EMULATED_CPU");
  const std::string cpu = cpu_env == nullptr || *cpu_env == '\0' ? "amx" : cpu_env;
  ASSERT_NE(Avx512Kernels(), nullptr);
  if (cpu == "amx") {
    EXPECT_NE(AmxKernels(), nullptr);
    EXPECT_STREQ(BestKernelsName(), "avx512-amx");
  } else if (cpu == "avx512-bf16") {
    EXPECT_EQ(AmxKernels(), nullptr);
    EXPECT_NE(Bf16PackedKernels(), nullptr);
    EXPECT_TRUE(Avx512HasW8A8Vnni());
    EXPECT_STREQ(BestKernelsName(), "avx512-packed");
  } else if (cpu == "avx512-vnni" || cpu == "avx512") {
    EXPECT_EQ(AmxKernels(), nullptr);
    EXPECT_EQ(Bf16PackedKernels(), nullptr);
    EXPECT_EQ(Bf16DotKernels(), nullptr);
    EXPECT_FALSE(Avx512HasBf16Dot());
    EXPECT_EQ(Avx512HasW8A8Vnni(), cpu == "avx512-vnni");
    EXPECT_STREQ(BestKernelsName(), "avx512");
  } else {
    FAIL() << "unknown LATENT_EMULATED_CPU " << cpu;
  }
}

}  // namespace
}  // namespace latent::kernels
