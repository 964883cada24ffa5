// The intrinsics of the AVX-512 and AMX kernels: the compiler's, or, in the emulated builds
// (LATENT_EMULATE_AVX512; src/kernels/CMakeLists.txt), portable ones that run on any CPU with
// AVX2 (kernels/emulation/). Every file under avx512/ and amx/ includes this
// instead of <immintrin.h>, and its target pragma (LATENT_AVX512_BEGIN and the like) is empty in
// that build, so that no AVX-512 instruction reaches its code.
#pragma once

#if defined(LATENT_EMULATE_AVX512)
#include "kernels/emulation/amx_tiles.h"
#include "kernels/emulation/avx512_intrinsics.h"
#else
#include <immintrin.h>
#endif
