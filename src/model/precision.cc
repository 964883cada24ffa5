#include "model/precision.h"

#include <string>

#include "base/error.h"

namespace latent::model {

Precision ParsePrecision(const std::string& name) {
  if (name == "auto") return Precision::kAuto;
  if (name == "bf16") return Precision::kBf16;
  if (name == "f32") return Precision::kF32;
  Fail("--precision: unknown precision '", name, "' (supported: auto, bf16, f32)");
}

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kF32:
      return "f32";
    default:
      return "auto";
  }
}

Precision ResolvePrecision(Precision requested, const CheckpointReport& report,
                           const weights::Checkpoint& ckpt) {
  if (requested != Precision::kAuto) return requested;
  for (const ExpectedWeight& t : report.weights) {
    if (t.kind != WeightKind::kLinear && t.kind != WeightKind::kExperts &&
        t.kind != WeightKind::kEmbedding) {
      continue;
    }
    const DType dtype = ckpt.Get(t.name).dtype;
    if (dtype == DType::kBF16 || dtype == DType::kF8E4M3) return Precision::kBf16;
  }
  return Precision::kF32;
}

void ApplyPrecision(Precision precision, kernels::WeightRef& w) {
  w.bf16_activations = precision == Precision::kBf16 && w.dtype != DType::kI8;
}

}  // namespace latent::model
