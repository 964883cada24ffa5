// What the CPU (and the OS, for the wider register state) can run, read once from CPUID. The
// kernel dispatch (kernels/dispatch.cc) and the fp8 row decoder (cache/fp8_rows.cc) ask here, so
// GCC and clang builds agree: clang's __builtin_cpu_supports cannot query f16c.
#pragma once

#if defined(LATENT_EMULATE_AVX512)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#endif

namespace latent {

// AVX2, FMA and F16C, with the OS saving the ymm state: what the AVX2 kernels need.
bool CpuHasAvx2();
// AVX-512 F/BW/VL/DQ plus FMA and BMI2, with the OS saving the zmm state.
bool CpuHasAvx512();
// CpuHasAvx512() and VNNI (vpdpbusd).
bool CpuHasAvx512Vnni();
// CpuHasAvx512() and AVX512-BF16 (vdpbf16ps).
bool CpuHasAvx512Bf16();
// CpuHasAvx512Bf16() and AVX512-VBMI (vpermi2b: 128-entry byte tables, the fp8 kernel's widening).
bool CpuHasAvx512Bf16Vbmi();
// CpuHasAvx512Bf16() and AMX-BF16 + AMX-TILE (TDPBF16PS on 16 x 64-byte tiles), with the OS
// saving the tile state (XCR0 XTILECFG and XTILEDATA) and, on Linux, this process granted the
// tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here; refused: false).
bool CpuHasAmxBf16();
// CpuHasAmxBf16() and AMX-INT8 (TDPBUSD: u8 x s8 tiles, int32 sums; the W8A8 kernel).
bool CpuHasAmxInt8();

#if defined(LATENT_EMULATE_AVX512)
// The emulated build (kernels/avx512/intrinsics.h): its AVX-512 and AMX kernels run wherever the
// AVX2 kernels do, and LATENT_EMULATED_CPU says which CPU to present: "amx" (Sapphire Rapids and
// later: everything, AMX-BF16 and AMX-INT8 too; the default), "avx512-bf16" (Zen 4/5: no AMX),
// "avx512-vnni" (Cascade Lake, Ice Lake: no BF16) or "avx512" (Skylake-SP: no VNNI either).
// Other names than the real queries', which the rest of the binary (the fp8 row decoder) keeps
// calling.
inline int EmulatedCpuLevel() {
  static const int level = [] {
    const char* names[] = {"avx512", "avx512-vnni", "avx512-bf16", "amx"};
    const char* value = std::getenv("LATENT_EMULATED_CPU");
    if (value == nullptr || *value == '\0') return 4;
    for (int i = 0; i < 4; ++i) {
      if (std::strcmp(value, names[i]) == 0) return i + 1;
    }
    std::fprintf(stderr,
                 "latent: error: LATENT_EMULATED_CPU=%s: expected amx, avx512-bf16, avx512-vnni "
                 "or avx512\n",
                 value);
    std::exit(2);
  }();
  return CpuHasAvx2() ? level : 0;
}
inline bool EmulatedCpuHasAvx512() { return EmulatedCpuLevel() >= 1; }
inline bool EmulatedCpuHasVnni() { return EmulatedCpuLevel() >= 2; }
inline bool EmulatedCpuHasBf16() { return EmulatedCpuLevel() >= 3; }  // with VBMI, as Zen 4
inline bool EmulatedCpuHasAmx() { return EmulatedCpuLevel() >= 4; }
#define CpuHasAvx512 EmulatedCpuHasAvx512
#define CpuHasAvx512Vnni EmulatedCpuHasVnni
#define CpuHasAvx512Bf16 EmulatedCpuHasBf16
#define CpuHasAvx512Bf16Vbmi EmulatedCpuHasBf16
#define CpuHasAmxBf16 EmulatedCpuHasAmx
#define CpuHasAmxInt8 EmulatedCpuHasAmx
#endif

}  // namespace latent
