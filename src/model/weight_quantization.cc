#include "model/weight_quantization.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "kernels/kernel_table.h"
#include "threads/thread_pool.h"

namespace latent::model {

WeightQuantization ParseWeightQuantization(const std::string& name) {
  if (name == "none") return WeightQuantization::kNone;
  if (name == "int8") return WeightQuantization::kInt8;
  Fail("--quantize: unknown mode '", name, "' (supported: none, int8)");
}

const char* WeightQuantizationName(WeightQuantization quantize) {
  return quantize == WeightQuantization::kInt8 ? "int8" : "none";
}

float QuantizeRowInt8(const float* w, int64_t k, int8_t* q) {
  float amax = 0.0f;
  for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(w[c]));
  const float scale = amax / 127.0f;
  if (!(scale > 0.0f)) {  // all zeros (or NaN): zeros, so the row contributes nothing
    std::fill(q, q + k, int8_t{0});
    return 0.0f;
  }
  for (int64_t c = 0; c < k; ++c) {
    // nearbyint rounds to nearest even in the default rounding mode, as torch.round does.
    const float v = std::nearbyint(w[c] / scale);
    q[c] = v == v ? static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f)) : int8_t{0};  // NaN: 0
  }
  return scale;
}

kernels::WeightRef QuantizeInt8(const kernels::WeightRef& w, OwnedWeights& owned) {
  const int64_t n = w.n, k = w.k;
  // [n, k] int8, then [n] f32 scales at a 64-byte boundary.
  const int64_t scale_offset = (n * k + 63) / 64 * 64;
  std::unique_ptr<uint8_t[]> buffer(new uint8_t[scale_offset + 4 * n + 64]);
  uint8_t* base = buffer.get();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  int8_t* q = reinterpret_cast<int8_t*>(base);
  float* scales = reinterpret_cast<float*>(base + scale_offset);
  const auto& kernels = kernels::BestKernels();
  const int64_t grain = std::max<int64_t>(1, (int64_t{256} << 10) / std::max<int64_t>(k, 1));
  threads::ParallelFor(n, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(k);
    for (int64_t r = r0; r < r1; ++r) {
      kernels.dequant_row(w, r, row.data());
      scales[r] = QuantizeRowInt8(row.data(), k, q + r * k);
    }
  });
  owned.buffers.push_back(std::move(buffer));
  kernels::WeightRef out;
  out.data = q;
  out.dtype = DType::kI8;
  out.n = n;
  out.k = k;
  out.scale = scales;
  out.scale_dtype = DType::kF32;
  out.block_n = 1;
  out.block_k = k;
  out.scale_row0 = 0;
  return out;
}

int64_t WeightBytes(const kernels::WeightRef& w) {
  int64_t bytes = w.n * w.k * static_cast<int64_t>(DTypeSize(w.dtype));
  if (w.scale != nullptr && w.block_n > 0 && w.block_k > 0) {
    bytes += (w.n + w.block_n - 1) / w.block_n * ((w.k + w.block_k - 1) / w.block_k) *
             static_cast<int64_t>(DTypeSize(w.scale_dtype));
  }
  return bytes;
}

bool QuantizedByInt8(const ExpectedWeight& w) {
  if (w.name == "lm_head.weight") return true;
  if (w.kind != WeightKind::kLinear && w.kind != WeightKind::kExperts) return false;
  return w.name.find(".indexer.") == std::string::npos;
}

int64_t LoadedWeightBytes(const ModelConfig& config, const weights::Checkpoint& ckpt,
                          const CheckpointReport& report, WeightQuantization quantize,
                          int64_t* checkpoint_bytes) {
  int64_t stored = 0, loaded = 0;
  for (const ExpectedWeight& w : report.weights) {
    const TensorView t = ckpt.Get(w.name);
    int64_t bytes = static_cast<int64_t>(t.NumBytes());
    const std::string scale_name = w.name + "_scale_inv";
    if (t.dtype == DType::kF8E4M3 && ckpt.Has(scale_name)) {
      bytes += static_cast<int64_t>(ckpt.Get(scale_name).NumBytes());
    }
    stored += bytes;
    if (quantize == WeightQuantization::kInt8 && QuantizedByInt8(w)) {
      const int64_t rows = t.NumElements() / std::max<int64_t>(1, t.shape[t.shape.rank() - 1]);
      loaded += t.NumElements() + 4 * rows;
    } else {
      loaded += bytes;
    }
  }
  if (quantize == WeightQuantization::kInt8 && config.tie_word_embeddings) {
    loaded += config.vocab_size * config.hidden_size + 4 * config.vocab_size;  // the int8 LM head
  }
  if (checkpoint_bytes != nullptr) *checkpoint_bytes = stored;
  return loaded;
}

}  // namespace latent::model
