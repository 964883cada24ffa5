// The opt-in oneDNN GEMM backend for prefill-sized linears (LATENT_GEMM=onednn, dispatch.cc):
// oneDNN's bf16 matmul, which on CPUs with AMX runs on the tile units (brg:avx512_core_amx_bf16)
// and elsewhere on AVX512-BF16 or AVX-512 code.
//
// Numerics: the activations are rounded to bf16 (oneDNN 2.6's CPU matmul has no f32 x bf16
// form), products are summed in f32 in an order oneDNN picks from the shape (M included) and
// its blocking, so a token's output depends on what else is in its batch: not batch invariant,
// and about bf16's error away from the f32 reference. Off by default for both reasons.
//
// Threads: the output columns are split into one slice per pool thread (threads/thread_pool.h)
// and each thread runs oneDNN single-threaded on its slice, with its own copy of that slice's
// weights in oneDNN's layout. So oneDNN's OpenMP team is never started (no second set of
// spinning threads next to the pool), and calls from inside a ParallelFor (per-head
// projections) are safe: the slices then run one after the other on the calling thread.
//
// Memory: every weight that goes through here is kept a second time, reordered (onednn_cache.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernel_table.h"
#include "kernels/weight_ref.h"

namespace latent::kernels::onednn {

// y[m, n] = bf16(x)[m, k] . W[n, k]^T through oneDNN, for bf16 W (any m >= 1). Returns false,
// writing nothing, when oneDNN cannot run it (no implementation on this CPU); it then stays off
// for the process.
bool Linear(const float* x, int64_t m, const WeightRef& w, float* y);

// The smallest m sent to oneDNN by FillOnednnLinear's kernel: LATENT_GEMM_MIN_ROWS, default 32.
int64_t MinRows();

// What onednn_cache.h holds (matmul primitives, packed weight copies), for tests.
struct CacheCounts {
  size_t matmuls = 0;
  size_t weights = 0;
};
CacheCounts CachedEntries();

// Replaces table.linear: bf16 weights with m >= MinRows() go to Linear above, everything else to
// the kernel it replaced.
void FillOnednnLinear(KernelTable& table);

}  // namespace latent::kernels::onednn
