// Scaled dot-product attention of one query token over L cached positions, per head.
// Keys and values are addressed by one pointer per position, so the same kernel reads rows in a
// paged cache (absorbed MLA: one shared key/value head, head stride 0) or materialised per-head
// keys and values (expanded MLA).
#pragma once

#include <cstdint>

namespace latent::kernels {

struct AttentionArgs {
  const float* q = nullptr;       // [num_heads, qk_dim]
  int64_t num_heads = 0;
  int64_t qk_dim = 0;
  const float* const* keys = nullptr;    // [L] -> key of head 0, qk_dim floats
  int64_t key_head_stride = 0;           // floats between heads' keys; 0: one shared head
  const float* const* values = nullptr;  // [L] -> value of head 0, v_dim floats
  int64_t value_head_stride = 0;
  int64_t v_dim = 0;
  int64_t length = 0;  // L
  float scale = 1.0f;  // Softmax scale applied to q.k.
  float* out = nullptr;     // [num_heads, v_dim]
  float* scratch = nullptr; // [L] scores (the reference kernel's; the AVX-512 one keeps its own)
};

// The scalar reference (KernelTable::attention of RefKernels()); use BestKernels().attention.
void AttentionRef(const AttentionArgs& args);

}  // namespace latent::kernels
