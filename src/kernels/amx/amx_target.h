// The target pragmas of the AMX kernels (linear_amx.cc: TDPBF16PS; linear_w8a8_amx.cc: TDPBUSD;
// linear_fp8_amx.cc, which adds AVX512-VBMI's byte permutes with LATENT_AMX_VBMI_BEGIN):
// everything between LATENT_AMX_BEGIN and LATENT_AMX_END compiles for AMX-TILE, AMX-BF16 and
// AMX-INT8 with AVX-512 (F/BW/VL/DQ, BF16), while the rest of the binary stays baseline x86-64;
// dispatch.cc runs that code only on CPUs with the features (base/cpu_features.h). Include
// avx512_common.h inside the region, as avx512_common.h explains.
#pragma once

// clang-format off
#if defined(LATENT_EMULATE_AVX512)  // see kernels/avx512/intrinsics.h
#define LATENT_AMX_BEGIN
#define LATENT_AMX_VBMI_BEGIN
#define LATENT_AMX_END
#elif defined(__clang__)
#define LATENT_AMX_BEGIN _Pragma("clang attribute push(__attribute__((target(\"amx-tile,amx-bf16,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi,bmi2\"))), apply_to = function)")
#define LATENT_AMX_VBMI_BEGIN _Pragma("clang attribute push(__attribute__((target(\"amx-tile,amx-bf16,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,f16c,bmi,bmi2\"))), apply_to = function)")
#define LATENT_AMX_END _Pragma("clang attribute pop")
#else
#define LATENT_AMX_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"amx-tile,amx-bf16,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi,bmi2\")")
#define LATENT_AMX_VBMI_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"amx-tile,amx-bf16,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,f16c,bmi,bmi2\")")
#define LATENT_AMX_END _Pragma("GCC pop_options")
#endif
// clang-format on
