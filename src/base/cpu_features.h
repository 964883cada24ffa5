// What the CPU (and the OS, for the wider register state) can run, read once from CPUID. The
// kernel dispatch (kernels/dispatch.cc) and the fp8 row decoder (cache/fp8_rows.cc) ask here, so
// GCC and clang builds agree: clang's __builtin_cpu_supports cannot query f16c.
#pragma once

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

#if defined(LATENT_EMULATE_AVX512)
// The kernel tests' emulated build (kernels/avx512/intrinsics.h): its AVX-512 and AMX kernels run
// wherever the AVX2 kernels do, so its dispatch and tests see every feature there. Other names
// than the real queries', which the rest of the binary (the fp8 row decoder) keeps calling.
inline bool EmulatedCpuHasAvx512() { return CpuHasAvx2(); }
#define CpuHasAvx512 EmulatedCpuHasAvx512
#define CpuHasAvx512Vnni EmulatedCpuHasAvx512
#define CpuHasAvx512Bf16 EmulatedCpuHasAvx512
#define CpuHasAvx512Bf16Vbmi EmulatedCpuHasAvx512
#define CpuHasAmxBf16 EmulatedCpuHasAvx512
#endif

}  // namespace latent
