#include "model/weight_quantization.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "kernels/kernel_table.h"
#include "kernels/quantize_row.h"
#include "parallel/communicator.h"
#include "threads/thread_pool.h"

namespace latent::model {

ExpertShard LoadOptions::Shard() const {
  if (communicator == nullptr) return {};
  return {communicator->rank(), communicator->size()};
}

WeightQuantization ParseWeightQuantization(const std::string& name) {
  if (name == "none") return WeightQuantization::kNone;
  if (name == "int8") return WeightQuantization::kInt8;
  if (name == "w8a8") return WeightQuantization::kW8A8;
  Fail("--quantize: unknown mode '", name, "' (supported: none, int8, w8a8)");
}

const char* WeightQuantizationName(WeightQuantization quantize) {
  switch (quantize) {
    case WeightQuantization::kInt8:
      return "int8";
    case WeightQuantization::kW8A8:
      return "w8a8";
    default:
      return "none";
  }
}

kernels::WeightRef QuantizeInt8(const kernels::WeightRef& w, OwnedWeights& owned, bool row_sums) {
  const int64_t n = w.n, k = w.k;
  // [n, k] int8, then [n] f32 scales at a 64-byte boundary, then (W8A8) [n] int32 row sums.
  const int64_t scale_offset = (n * k + 63) / 64 * 64;
  const int64_t sums_offset = scale_offset + 4 * n;
  std::unique_ptr<uint8_t[]> buffer(new uint8_t[sums_offset + (row_sums ? 4 * n : 0) + 64]);
  uint8_t* base = buffer.get();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  int8_t* q = reinterpret_cast<int8_t*>(base);
  float* scales = reinterpret_cast<float*>(base + scale_offset);
  int32_t* sums = row_sums ? reinterpret_cast<int32_t*>(base + sums_offset) : nullptr;
  const auto& kernels = kernels::BestKernels();
  const int64_t grain = std::max<int64_t>(1, (int64_t{256} << 10) / std::max<int64_t>(k, 1));
  threads::ParallelFor(n, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(k);
    for (int64_t r = r0; r < r1; ++r) {
      kernels.dequant_row(w, r, row.data());
      scales[r] = QuantizeRowInt8(row.data(), k, q + r * k);
      if (sums != nullptr) sums[r] = kernels::SumRowInt8(q + r * k, k);
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
  out.row_sums = sums;
  return out;
}

int64_t WeightBytes(const kernels::WeightRef& w) {
  int64_t bytes = w.n * w.k * static_cast<int64_t>(DTypeSize(w.dtype));
  if (w.scale != nullptr && w.block_n > 0 && w.block_k > 0) {
    bytes += (w.n + w.block_n - 1) / w.block_n * ((w.k + w.block_k - 1) / w.block_k) *
             static_cast<int64_t>(DTypeSize(w.scale_dtype));
  }
  if (w.row_sums != nullptr) bytes += 4 * w.n;
  return bytes;
}

bool QuantizedByInt8(const ExpectedWeight& w) { return w.quantize != QuantizeRule::kKeep; }

bool W8A8Activations(const ExpectedWeight& w) {
  return w.quantize == QuantizeRule::kWeightsAndActivations;
}

int64_t LoadedWeightBytes(const ModelConfig& config, const weights::Checkpoint& ckpt,
                          const CheckpointReport& report, WeightQuantization quantize,
                          int64_t* checkpoint_bytes, const ExpertShard& shard) {
  const auto stored = [&](const ExpectedWeight& w) {
    const TensorView t = ckpt.Get(w.name);
    int64_t bytes = static_cast<int64_t>(t.NumBytes());
    const std::string scale_name = w.name + "_scale_inv";
    if (t.dtype == DType::kF8E4M3 && ckpt.Has(scale_name)) {
      bytes += static_cast<int64_t>(ckpt.Get(scale_name).NumBytes());
    }
    return bytes;
  };
  return LoadedWeightBytes(config, report.weights, stored, quantize, checkpoint_bytes, shard);
}

int64_t LoadedWeightBytes(const ModelConfig& config, const std::vector<ExpectedWeight>& weights,
                          const StoredBytesFn& stored_bytes, WeightQuantization quantize,
                          int64_t* checkpoint_bytes, const ExpertShard& shard) {
  int64_t stored = 0, loaded = 0;
  const int64_t experts = config.n_routed_experts;
  for (const ExpectedWeight& w : weights) {
    if (w.kind == WeightKind::kUnused) continue;  // never loaded, and may be absent
    if (w.expert >= 0 && !shard.Holds(w.expert, experts)) continue;  // another rank's expert
    // The checkpoint's shape equals the listed one (ValidateCheckpoint).
    int64_t bytes = stored_bytes(w);
    // Fused experts [E(+Z), out, in]: this rank's experts' slices.
    int64_t elements = w.shape.NumElements();
    if (w.kind == WeightKind::kExperts && shard.ranks > 1) {
      const int64_t held = shard.End(experts) - shard.Begin(experts);
      bytes = bytes / w.shape[0] * held;
      elements = elements / w.shape[0] * held;
    }
    stored += bytes;
    if (quantize != WeightQuantization::kNone && QuantizedByInt8(w)) {
      const int64_t rows = elements / std::max<int64_t>(1, w.shape[w.shape.rank() - 1]);
      loaded += elements + 4 * rows;
      if (quantize == WeightQuantization::kW8A8 && W8A8Activations(w)) loaded += 4 * rows;
    } else {
      loaded += bytes;
    }
  }
  if (quantize != WeightQuantization::kNone && LmHeadTied(config, weights)) {
    loaded += config.vocab_size * config.hidden_size + 4 * config.vocab_size;  // the int8 LM head
    if (quantize == WeightQuantization::kW8A8) loaded += 4 * config.vocab_size;  // its row sums
  }
  if (checkpoint_bytes != nullptr) *checkpoint_bytes = stored;
  return loaded;
}

const char* StoredDTypeName(StoredDType dtype) {
  return dtype == StoredDType::kFP8Block ? "fp8" : "bf16";
}

int64_t StoredBytes(const ExpectedWeight& w, StoredDType dtype, int64_t block_n, int64_t block_k) {
  const int64_t elements = w.shape.NumElements();
  if (w.kind == WeightKind::kRouter || w.kind == WeightKind::kBuffer) return 4 * elements;
  if (dtype == StoredDType::kBF16 || !Fp8Eligible(w) || w.shape.rank() < 2) return 2 * elements;
  // e4m3 values, then f32 scales [leading..., ceil(N / block_n), ceil(K / block_k)].
  const int r = w.shape.rank();
  int64_t scales =
      (w.shape[r - 2] + block_n - 1) / block_n * ((w.shape[r - 1] + block_k - 1) / block_k);
  for (int i = 0; i + 2 < r; ++i) scales *= w.shape[i];
  return elements + 4 * scales;
}

}  // namespace latent::model
