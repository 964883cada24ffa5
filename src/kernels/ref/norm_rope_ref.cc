#include "kernels/kernel_table.h"
#include "kernels/norm_rope.h"

namespace latent::kernels {
namespace {

// x [rope] rotated in place by cos/sin [rope / 2].
void Rotate(float* x, int64_t rope, bool interleaved, const float* cos, const float* sin) {
  const int64_t half = rope / 2;
  for (int64_t i = 0; i < half; ++i) {
    float* a = interleaved ? &x[2 * i] : &x[i];
    float* b = interleaved ? &x[2 * i + 1] : &x[i + half];
    const float x0 = *a, x1 = *b;
    *a = x0 * cos[i] - x1 * sin[i];
    *b = x1 * cos[i] + x0 * sin[i];
  }
}

}  // namespace

void NormRopeRef(const NormRopeArgs& a) {
  const int64_t half = a.rope / 2;
  for (int64_t t = 0; t < a.tokens; ++t) {
    float* row = a.kv + t * a.kv_stride;
    RefKernels().rms_norm(row, 1, a.latent, a.norm_weight, a.norm_dtype, a.eps, row);
    const float* cos = a.cos + t * half;
    const float* sin = a.sin + t * half;
    Rotate(row + a.latent, a.rope, a.interleaved, cos, sin);
    for (int64_t h = 0; h < a.heads; ++h) {
      Rotate(a.q + (t * a.heads + h) * a.q_stride + a.q_offset, a.rope, a.interleaved, cos, sin);
    }
  }
}

}  // namespace latent::kernels
