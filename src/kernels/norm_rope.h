// MLA's per-token normalisation and rotation in one pass over the token's rows: the latent part
// of the cache row is RMS-normalised (kv_a_layernorm), and the rotary key of that row and the
// rotary part of every query head are rotated by the token's cos/sin. Rows are touched once
// while in L1, instead of once by the norm and once per head by the rotation.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace latent::kernels {

struct NormRopeArgs {
  int64_t tokens = 0;
  // [tokens, kv_stride]: [0, latent) normalised in place, [latent, latent + rope) rotated.
  float* kv = nullptr;
  int64_t kv_stride = 0;
  int64_t latent = 0;
  const void* norm_weight = nullptr;  // [latent], f32/bf16/f16
  DType norm_dtype = DType::kF32;
  float eps = 1e-6f;
  // [tokens, heads, q_stride]: each head's [q_offset, q_offset + rope) rotated.
  float* q = nullptr;
  int64_t heads = 0;
  int64_t q_stride = 0;
  int64_t q_offset = 0;
  int64_t rope = 0;            // rotary dims, even
  bool interleaved = true;     // pairs (2i, 2i + 1), else (i, i + rope / 2)
  const float* cos = nullptr;  // [tokens, rope / 2]
  const float* sin = nullptr;  // [tokens, rope / 2]
};

// The scalar reference (KernelTable::norm_rope of RefKernels()): rms_norm, then each pair rotated
// as ops::Rope::Apply does, (x0 cos - x1 sin, x1 cos + x0 sin) with every product rounded (no
// fused multiply-add); the AVX-512 kernel rotates bit-identically.
void NormRopeRef(const NormRopeArgs& args);

}  // namespace latent::kernels
