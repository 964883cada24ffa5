#include "base/cpu_features.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define LATENT_HAVE_CPUID 1
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#else
#define LATENT_HAVE_CPUID 0
#endif

namespace latent {
namespace {

#if LATENT_HAVE_CPUID
struct CpuFeatures {
  bool avx2 = false, avx512 = false, vnni = false, vbmi = false, bf16 = false, amx_bf16 = false;
  bool amx_int8 = false;
};

// The XCR0 bits the OS sets when it saves a register state across context switches.
constexpr unsigned kXcr0Ymm = 0x6u;     // xmm, ymm
constexpr unsigned kXcr0Zmm = 0xe6u;    // xmm, ymm, opmask, zmm0-15 upper halves, zmm16-31
constexpr unsigned kXcr0Tiles = 0x60000u;  // XTILECFG (bit 17), XTILEDATA (bit 18)
constexpr unsigned kLeaf7EdxAmxBf16 = 1u << 22, kLeaf7EdxAmxTile = 1u << 24;
constexpr unsigned kLeaf7EdxAmxInt8 = 1u << 25;

// Linux keeps the 8 KiB tile data state off until a process asks for it (since 5.16); without
// the grant the first tile instruction faults. The grant is process-wide, for every thread.
bool RequestTileData() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;  // no known way to ask: no AMX
#endif
}

CpuFeatures ReadCpuFeatures() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool fma = (ecx & bit_FMA) != 0, osxsave = (ecx & bit_OSXSAVE) != 0;
  const bool avx = (ecx & bit_AVX) != 0, f16c = (ecx & bit_F16C) != 0;
  if (!(fma && osxsave && avx && f16c)) return f;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & kXcr0Ymm) != kXcr0Ymm) return f;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const unsigned leaf7_ebx = ebx, leaf7_ecx = ecx, leaf7_edx = edx;
  f.avx2 = (leaf7_ebx & bit_AVX2) != 0;
  const bool bmi2 = (leaf7_ebx & bit_BMI2) != 0;
  const bool avx512 = (leaf7_ebx & bit_AVX512F) && (leaf7_ebx & bit_AVX512BW) &&
                      (leaf7_ebx & bit_AVX512VL) && (leaf7_ebx & bit_AVX512DQ);
  f.avx512 = f.avx2 && bmi2 && avx512 && (xcr0_lo & kXcr0Zmm) == kXcr0Zmm;
  f.vnni = f.avx512 && (leaf7_ecx & bit_AVX512VNNI) != 0;
  f.vbmi = f.avx512 && (leaf7_ecx & bit_AVX512VBMI) != 0;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  f.bf16 = f.avx512 && (eax & bit_AVX512BF16) != 0;
  const unsigned amx = kLeaf7EdxAmxBf16 | kLeaf7EdxAmxTile;
  f.amx_bf16 = f.bf16 && (leaf7_edx & amx) == amx && (xcr0_lo & kXcr0Tiles) == kXcr0Tiles &&
               RequestTileData();
  f.amx_int8 = f.amx_bf16 && (leaf7_edx & kLeaf7EdxAmxInt8) != 0;
  return f;
}

const CpuFeatures& Features() {
  static const CpuFeatures features = ReadCpuFeatures();
  return features;
}
#endif

}  // namespace

#if LATENT_HAVE_CPUID
bool CpuHasAvx2() { return Features().avx2; }
bool CpuHasAvx512() { return Features().avx512; }
bool CpuHasAvx512Vnni() { return Features().vnni; }
bool CpuHasAvx512Bf16() { return Features().bf16; }
bool CpuHasAvx512Bf16Vbmi() { return Features().bf16 && Features().vbmi; }
bool CpuHasAmxBf16() { return Features().amx_bf16; }
bool CpuHasAmxInt8() { return Features().amx_int8; }
#else
bool CpuHasAvx2() { return false; }
bool CpuHasAvx512() { return false; }
bool CpuHasAvx512Vnni() { return false; }
bool CpuHasAvx512Bf16() { return false; }
bool CpuHasAvx512Bf16Vbmi() { return false; }
bool CpuHasAmxBf16() { return false; }
bool CpuHasAmxInt8() { return false; }
#endif

}  // namespace latent
