// The target pragmas of the AVX-512 files that use AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16):
// everything between LATENT_AVX512_BF16_BEGIN and _END compiles for AVX-512 F/BW/VL/DQ plus
// BF16 (and, for the _VBMI pair, AVX512-VBMI's byte permutes), while the rest of the binary stays
// baseline x86-64; dispatch.cc runs that code only on CPUs with the features. Include
// avx512_common.h inside the region, as avx512_common.h explains.
#pragma once

// clang-format off
#if defined(LATENT_EMULATE_AVX512)  // see kernels/avx512/intrinsics.h
#define LATENT_AVX512_BF16_BEGIN
#define LATENT_AVX512_BF16_VBMI_BEGIN
#define LATENT_AVX512_BF16_END
#elif defined(__clang__)
#define LATENT_AVX512_BF16_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi,bmi2\"))), apply_to = function)")
#define LATENT_AVX512_BF16_VBMI_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,f16c,bmi,bmi2\"))), apply_to = function)")
#define LATENT_AVX512_BF16_END _Pragma("clang attribute pop")
#else
#define LATENT_AVX512_BF16_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi,bmi2\")")
#define LATENT_AVX512_BF16_VBMI_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,f16c,bmi,bmi2\")")
#define LATENT_AVX512_BF16_END _Pragma("GCC pop_options")
#endif
// clang-format on
