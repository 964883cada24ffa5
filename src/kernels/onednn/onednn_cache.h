// The oneDNN objects the opt-in GEMM backend (onednn_linear.h) reuses across calls: one matmul
// primitive per shape and one copy of each bf16 weight reordered into the layout that primitive
// prefers. Both live for the process and are safe to look up from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/weight_ref.h"

namespace latent::kernels::onednn {

// The process's CPU engine.
const dnnl::engine& CpuEngine();

// y[m, n] (f32) = x[m, k] (bf16) . W[n, k]^T (bf16, `weights` layout), all dense, with a
// caller-provided scratchpad of `scratchpad_bytes`. (Dense y: with a row stride other than n,
// oneDNN 2.6 falls back from its brgemm kernels, the AMX ones included, to gemm:jit.)
struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory::desc src, weights, dst, scratchpad;
  size_t scratchpad_bytes = 0;
};

// The matmul for this exact shape, created on first use. oneDNN sizes its blocking for the
// OpenMP thread count of the creating thread: call it where that count is what execution uses.
// Throws dnnl::error when oneDNN has no implementation (a CPU without AVX-512).
const Matmul& GetMatmul(int64_t m, int64_t n, int64_t k);

// The bf16 weight `w` ([n, k] row-major) reordered into `desc`, made on first use. Keyed by the
// data pointer, the shape and a sample of the bytes (an address reused for other data of the
// same shape is not taken for the old weight), so `w` must not change while the process uses it:
// true of checkpoint weights, which are mapped read-only.
const dnnl::memory& GetPackedWeights(const WeightRef& w, const dnnl::memory::desc& desc);

}  // namespace latent::kernels::onednn
