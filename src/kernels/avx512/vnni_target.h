// The target pragmas of the AVX-512 files that use AVX512-VNNI (vpdpbusd: the W8A8 kernels,
// linear_w8a8_vnni.cc and linear_w8a8_vnni_packed.cc): everything between LATENT_VNNI_BEGIN and
// LATENT_VNNI_END compiles for AVX-512 F/BW/VL/DQ plus VNNI, while the rest of the binary stays
// baseline x86-64; dispatch.cc runs that code only on CPUs with the features. Include
// avx512_common.h inside the region, as avx512_common.h explains.
#pragma once

// clang-format off
#if defined(LATENT_EMULATE_AVX512)  // see kernels/avx512/intrinsics.h
#define LATENT_VNNI_BEGIN
#define LATENT_VNNI_END
#elif defined(__clang__)
#define LATENT_VNNI_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi,bmi2\"))), apply_to = function)")
#define LATENT_VNNI_END _Pragma("clang attribute pop")
#else
#define LATENT_VNNI_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi,bmi2\")")
#define LATENT_VNNI_END _Pragma("GCC pop_options")
#endif
// clang-format on
