// AVX-512 (F, BW, VL, DQ, BF16, VNNI, VBMI) intrinsics in portable code, for the emulated builds
// (LATENT_EMULATE_AVX512; src/kernels/CMakeLists.txt: latent_kernels_emulated for the kernel tests,
// or latent_kernels itself in a tree of its own): CI's CPU and many developers' have AVX2 only,
// and without this the AVX-512 and AMX kernels (what Zen 4/5 and Xeon users run) would only ever
// be compiled there. simde (Debian's libsimde-dev) supplies most
// intrinsics under their own names (SIMDE_ENABLE_NATIVE_ALIASES); this file adds those simde 0.7
// lacks and replaces the ones whose rounding must follow Intel's definition (vdpbf16ps,
// vcvtne2ps2bf16). Any intrinsic neither provides stays the compiler's, whose AVX-512 target
// then fails to inline: the emulated build cannot silently run a real AVX-512 instruction.
//
// Compiled with AVX2, FMA and F16C (the emulated AVX-512 files' flags), so the 256-bit ones are
// the compiler's own and simde builds each 512-bit one from two of them; GCC contracts a multiply
// and an add into an FMA there as it does in the real AVX-512 build. Lane-wise helpers below go
// through arrays (Lanes, FromLanes): slow, but exact and obviously so. Written against simde 0.7
// (Debian 12); every name defined here is #undef'd first, as a later simde may alias it too.
#pragma once

#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include "tensor/dtype.h"

namespace latent::kernels::emulated {

template <class T, class V>
std::array<T, sizeof(V) / sizeof(T)> Lanes(V v) {
  std::array<T, sizeof(V) / sizeof(T)> a;
  std::memcpy(a.data(), &v, sizeof(V));
  return a;
}

template <class V, class T, std::size_t N>
V FromLanes(const std::array<T, N>& a) {
  static_assert(sizeof(V) == N * sizeof(T));
  V v;
  std::memcpy(&v, a.data(), sizeof(V));
  return v;
}

// Lanes whose mask bit is set read memory, the others are `fill` (masked-off lanes never touch
// memory, as in hardware: the kernels rely on it at the ends of rows).
template <class V, class T, class Mask>
V MaskedLoad(Mask k, const void* p, V fill) {
  auto a = Lanes<T>(fill);
  const T* src = static_cast<const T*>(p);
  for (std::size_t i = 0; i < a.size(); ++i) {
    if ((k >> i) & 1) std::memcpy(&a[i], src + i, sizeof(T));
  }
  return FromLanes<V>(a);
}

template <class T, class V, class Mask>
void MaskedStore(void* p, Mask k, V v) {
  const auto a = Lanes<T>(v);
  T* dst = static_cast<T*>(p);
  for (std::size_t i = 0; i < a.size(); ++i) {
    if ((k >> i) & 1) std::memcpy(dst + i, &a[i], sizeof(T));
  }
}

// convert_fp32_to_bfloat16 of Intel's SDM: NaN stays NaN (quieted), a denormal becomes a zero of
// its sign (DAZ, whatever MXCSR says), the rest rounds to nearest even.
inline uint16_t RoundToBf16(float f) {
  const uint32_t u = F32ToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

// An f32 result of vdpbf16ps / TDPBF16PS: denormals flushed to zero.
inline float FlushDenormal(float f) {
  const uint32_t u = F32ToBits(f);
  return (u & 0x7f800000u) == 0 ? BitsToF32(u & 0x80000000u) : f;
}

// A bf16 input of vdpbf16ps / TDPBF16PS: denormals read as zero.
inline float Bf16Input(uint16_t h) { return FlushDenormal(BF16ToF32(h)); }

// One lane of vdpbf16ps as the SDM writes it: acc += a_odd * b_odd, then acc += a_even * b_even,
// each an FMA with DAZ on its inputs and FTZ on its result.
inline float DotBf16Pair(float acc, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1) {
  acc = FlushDenormal(std::fma(Bf16Input(a1), Bf16Input(b1), FlushDenormal(acc)));
  return FlushDenormal(std::fma(Bf16Input(a0), Bf16Input(b0), acc));
}

inline __m512 Dpbf16(__m512 acc, __m512bh a, __m512bh b) {
  auto r = Lanes<float>(acc);
  const auto x = Lanes<uint16_t>(a), w = Lanes<uint16_t>(b);
  for (int i = 0; i < 16; ++i) {
    r[i] = DotBf16Pair(r[i], x[2 * i], x[2 * i + 1], w[2 * i], w[2 * i + 1]);
  }
  return FromLanes<__m512>(r);
}

// vcvtne2ps2bf16: the low 16 values from b, the high 16 from a.
inline __m512bh Cvtne2psPbh(__m512 a, __m512 b) {
  const auto hi = Lanes<float>(a), lo = Lanes<float>(b);
  std::array<uint16_t, 32> r;
  for (int i = 0; i < 16; ++i) {
    r[i] = RoundToBf16(lo[i]);
    r[16 + i] = RoundToBf16(hi[i]);
  }
  return FromLanes<__m512bh>(r);
}

inline __m256bh CvtnepsPbh(__m512 a) {
  const auto f = Lanes<float>(a);
  std::array<uint16_t, 16> r;
  for (int i = 0; i < 16; ++i) r[i] = RoundToBf16(f[i]);
  return FromLanes<__m256bh>(r);
}

// The reductions in GCC's order (avx512fintrin.h, __MM512_REDUCE_OP): halves, then quarters,
// then pairs; the kernels' sums must come out as on hardware bit for bit.
template <class T, class Op, std::size_t N>
T ReduceTree(std::array<T, N> v, Op op) {
  for (std::size_t half = N / 2; half >= 1; half /= 2) {
    for (std::size_t i = 0; i < half; ++i) v[i] = op(v[i + half], v[i]);
  }
  return v[0];
}

inline float ReduceAddPs(__m512 v) {
  return ReduceTree(Lanes<float>(v), [](float a, float b) { return a + b; });
}

// vmaxps(a, b): b where either is NaN or both are zeros. GCC's _mm512_reduce_max_ps puts the
// upper half first in its first two steps and the lower first in its last two.
inline float ReduceMaxPs(__m512 v) {
  const auto max = [](float a, float b) { return a > b ? a : b; };
  auto f = Lanes<float>(v);
  for (int i = 0; i < 8; ++i) f[i] = max(f[i + 8], f[i]);
  for (int i = 0; i < 4; ++i) f[i] = max(f[i + 4], f[i]);
  for (int i = 0; i < 2; ++i) f[i] = max(f[i], f[i + 2]);
  return max(f[0], f[1]);
}

inline double ReduceAddPd(__m512d v) {
  return ReduceTree(Lanes<double>(v), [](double a, double b) { return a + b; });
}

inline int ReduceAddEpi32(__m512i v) {
  const auto a = Lanes<uint32_t>(v);
  uint32_t s = 0;
  for (uint32_t x : a) s += x;  // wraps, as vpaddd does
  return static_cast<int>(s);
}

// vcvtps2dq under the default MXCSR: nearest even; NaN and out of range give 0x80000000.
inline __m512i CvtpsEpi32(__m512 v) {
  const auto f = Lanes<float>(v);
  std::array<int32_t, 16> r;
  for (int i = 0; i < 16; ++i) {
    const float x = std::nearbyint(f[i]);
    r[i] = (x >= -2147483648.0f && x < 2147483648.0f) ? static_cast<int32_t>(x) : INT32_MIN;
  }
  return FromLanes<__m512i>(r);
}

// The 16 lanes of From in v, each converted to To, as the 512-bit vector Out.
template <class Out, class To, class From, class V>
Out ConvertLanes16(V v) {
  const auto a = Lanes<From>(v);
  std::array<To, 16> r;
  for (int i = 0; i < 16; ++i) r[i] = static_cast<To>(a[i]);
  return FromLanes<Out>(r);
}

// (Arrays of floats rather than of __m256 halves: vector types lose their attributes as template
// arguments.)
inline __m512 CvtphPs(__m256i h) {
  std::array<float, 16> f;
  _mm256_storeu_ps(f.data(), _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
  _mm256_storeu_ps(f.data() + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
  return FromLanes<__m512>(f);
}

inline __m512d CvtpsPd(__m256 v) {
  const auto f = Lanes<float>(v);
  std::array<double, 8> r;
  for (int i = 0; i < 8; ++i) r[i] = f[i];
  return FromLanes<__m512d>(r);
}

inline __m256 Extractf32x8(__m512 v, int imm) {
  const auto f = Lanes<float>(v);
  return _mm256_loadu_ps(f.data() + 8 * (imm & 1));
}

// vshuff32x4: lanes 0-1 of the result are 128-bit lanes of a, lanes 2-3 of b, each picked by two
// bits of imm.
inline __m512 ShuffleF32x4(__m512 a, __m512 b, int imm) {
  const auto x = Lanes<float>(a), y = Lanes<float>(b);
  std::array<float, 16> r;
  for (int lane = 0; lane < 4; ++lane) {
    const auto& from = lane < 2 ? x : y;
    const int pick = (imm >> (2 * lane)) & 3;
    for (int i = 0; i < 4; ++i) r[4 * lane + i] = from[4 * pick + i];
  }
  return FromLanes<__m512>(r);
}

inline __m512 Mask3FmaddPs(__m512 a, __m512 b, __m512 c, __mmask16 k) {
  const auto x = Lanes<float>(a), y = Lanes<float>(b);
  auto r = Lanes<float>(c);
  for (int i = 0; i < 16; ++i) {
    if ((k >> i) & 1) r[i] = std::fma(x[i], y[i], r[i]);
  }
  return FromLanes<__m512>(r);
}

inline void MaskCvtepi32StoreuEpi8(void* p, __mmask16 k, __m512i v) {
  const auto a = Lanes<int32_t>(v);
  std::array<int8_t, 16> bytes;
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<int8_t>(a[i]);  // vpmovdb truncates
  MaskedStore<int8_t>(p, k, FromLanes<__m128i>(bytes));
}

inline __mmask16 CmpeqEpi8Mask(__m128i a, __m128i b) {
  return static_cast<__mmask16>(_mm_movemask_epi8(_mm_cmpeq_epi8(a, b)));
}

inline __m512i Zextsi256Si512(__m256i v) {
  std::array<uint8_t, 64> bytes{};
  std::memcpy(bytes.data(), &v, 32);
  return FromLanes<__m512i>(bytes);
}

// The aligned 512-bit loads and stores fault on hardware unless the address is a multiple of 64;
// simde's only assume it. Abort like the fault would, naming the address.
inline const void* Aligned64(const void* p, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 64 != 0) {
    std::fprintf(stderr, "emulated %s: %p is not 64-byte aligned\n", what, p);
    std::abort();
  }
  return p;
}

inline __m512 LoadPs(const void* p) { return _mm512_loadu_ps(Aligned64(p, "_mm512_load_ps")); }
inline __m512i LoadSi512(const void* p) {
  return _mm512_loadu_si512(Aligned64(p, "_mm512_load_si512"));
}
inline void StorePs(void* p, __m512 v) {
  _mm512_storeu_ps(const_cast<void*>(Aligned64(p, "_mm512_store_ps")), v);
}
inline void StoreSi512(void* p, __m512i v) {
  _mm512_storeu_si512(const_cast<void*>(Aligned64(p, "_mm512_store_si512")), v);
}

// vscalefps: a * 2^floor(b) with the whole exponent range (simde's a * exp2(floor(b)) overflows
// 2^floor(b) first). In double the scaling is exact, and the one rounding back to f32 (cvtsd2ss)
// follows MXCSR's FTZ as the instruction does; a denormal a read through cvtss2sd follows DAZ.
inline float ScalefLane(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;  // the NaN, quieted
  if (std::isinf(b)) {
    if (b > 0) return a == 0 ? std::numeric_limits<float>::quiet_NaN() : a * b;
    return std::isinf(a) ? std::numeric_limits<float>::quiet_NaN() : a * 0.0f;
  }
  const double e = std::fmin(std::fmax(std::floor(static_cast<double>(b)), -1000.0), 1000.0);
  volatile double wide = static_cast<double>(a);  // volatile: the conversions happen at run time
  return static_cast<float>(std::ldexp(wide, static_cast<int>(e)));
}

inline __m512 ScalefPs(__m512 a, __m512 b) {
  auto x = Lanes<float>(a);
  const auto y = Lanes<float>(b);
  for (int i = 0; i < 16; ++i) x[i] = ScalefLane(x[i], y[i]);
  return FromLanes<__m512>(x);
}

}  // namespace latent::kernels::emulated

// Replace simde's vdpbf16ps (even pair first, no DAZ/FTZ) with the SDM's.
#undef _mm512_dpbf16_ps
#define _mm512_dpbf16_ps(acc, a, b) latent::kernels::emulated::Dpbf16(acc, a, b)
#undef _mm512_cvtne2ps_pbh
#define _mm512_cvtne2ps_pbh(a, b) latent::kernels::emulated::Cvtne2psPbh(a, b)
#undef _mm512_cvtneps_pbh
#define _mm512_cvtneps_pbh(a) latent::kernels::emulated::CvtnepsPbh(a)
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps(v) latent::kernels::emulated::ReduceAddPs(v)
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps(v) latent::kernels::emulated::ReduceMaxPs(v)
#undef _mm512_reduce_add_pd
#define _mm512_reduce_add_pd(v) latent::kernels::emulated::ReduceAddPd(v)
#undef _mm512_reduce_add_epi32
#define _mm512_reduce_add_epi32(v) latent::kernels::emulated::ReduceAddEpi32(v)
#undef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32(v) latent::kernels::emulated::CvtpsEpi32(v)
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(v) \
  latent::kernels::emulated::ConvertLanes16<__m512, float, int32_t>(v)
#undef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32(v) \
  latent::kernels::emulated::ConvertLanes16<__m512i, int32_t, int8_t>(v)
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32(v) \
  latent::kernels::emulated::ConvertLanes16<__m512i, int32_t, uint16_t>(v)
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps(v) latent::kernels::emulated::CvtphPs(v)
#undef _mm512_cvtps_pd
#define _mm512_cvtps_pd(v) latent::kernels::emulated::CvtpsPd(v)
#undef _mm512_cvtss_f32
#define _mm512_cvtss_f32(v) latent::kernels::emulated::Lanes<float>(v)[0]
#undef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps(v, imm) latent::kernels::emulated::Extractf32x8(v, imm)
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm) latent::kernels::emulated::ShuffleF32x4(a, b, imm)
#undef _mm512_mask3_fmadd_ps
#define _mm512_mask3_fmadd_ps(a, b, c, k) latent::kernels::emulated::Mask3FmaddPs(a, b, c, k)
#undef _mm512_mask_cmp_ps_mask
#define _mm512_mask_cmp_ps_mask(k, a, b, imm) \
  static_cast<__mmask16>((k) & simde_mm512_cmp_ps_mask(a, b, imm))
#undef _mm512_mask_cvtepi32_storeu_epi8
#define _mm512_mask_cvtepi32_storeu_epi8(p, k, v) \
  latent::kernels::emulated::MaskCvtepi32StoreuEpi8(p, k, v)
#undef _mm512_zextsi256_si512
#define _mm512_zextsi256_si512(v) latent::kernels::emulated::Zextsi256Si512(v)
#undef _mm_cmpeq_epi8_mask
#define _mm_cmpeq_epi8_mask(a, b) latent::kernels::emulated::CmpeqEpi8Mask(a, b)
// Masked loads and stores: element type, vector type, fill.
#undef _mm512_mask_loadu_ps
#define _mm512_mask_loadu_ps(src, k, p) \
  latent::kernels::emulated::MaskedLoad<__m512, float>(k, p, src)
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, p) \
  latent::kernels::emulated::MaskedLoad<__m512, float>(k, p, _mm512_setzero_ps())
#undef _mm512_maskz_loadu_epi32
#define _mm512_maskz_loadu_epi32(k, p) \
  latent::kernels::emulated::MaskedLoad<__m512i, int32_t>(k, p, _mm512_setzero_si512())
#undef _mm512_maskz_loadu_epi16
#define _mm512_maskz_loadu_epi16(k, p) \
  latent::kernels::emulated::MaskedLoad<__m512i, int16_t>(k, p, _mm512_setzero_si512())
#undef _mm512_maskz_loadu_epi8
#define _mm512_maskz_loadu_epi8(k, p) \
  latent::kernels::emulated::MaskedLoad<__m512i, int8_t>(k, p, _mm512_setzero_si512())
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16(k, p) \
  latent::kernels::emulated::MaskedLoad<__m256i, int16_t>(k, p, _mm256_setzero_si256())
#undef _mm256_maskz_loadu_epi8
#define _mm256_maskz_loadu_epi8(k, p) \
  latent::kernels::emulated::MaskedLoad<__m256i, int8_t>(k, p, _mm256_setzero_si256())
#undef _mm_maskz_loadu_epi8
#define _mm_maskz_loadu_epi8(k, p) \
  latent::kernels::emulated::MaskedLoad<__m128i, int8_t>(k, p, _mm_setzero_si128())
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps(p, k, v) latent::kernels::emulated::MaskedStore<float>(p, k, v)
#undef _mm512_mask_storeu_epi32
#define _mm512_mask_storeu_epi32(p, k, v) latent::kernels::emulated::MaskedStore<int32_t>(p, k, v)
#undef _mm512_load_ps
#define _mm512_load_ps(p) latent::kernels::emulated::LoadPs(p)
#undef _mm512_load_si512
#define _mm512_load_si512(p) latent::kernels::emulated::LoadSi512(p)
#undef _mm512_store_ps
#define _mm512_store_ps(p, v) latent::kernels::emulated::StorePs(p, v)
#undef _mm512_store_si512
#define _mm512_store_si512(p, v) latent::kernels::emulated::StoreSi512(p, v)
#undef _mm512_scalef_ps
#define _mm512_scalef_ps(a, b) latent::kernels::emulated::ScalefPs(a, b)
