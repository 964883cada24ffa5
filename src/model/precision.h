// `--precision`: which precision `auto` means for a checkpoint, and the weights it applies to.
#pragma once

#include "kernels/weight_ref.h"
#include "model/load_options.h"
#include "model/weight_table.h"
#include "weights/checkpoint.h"

namespace latent::model {

// `requested` unless kAuto; kAuto: kBf16 when any linear weight latent loads from `ckpt`
// (report.weights of kinds kLinear, kExperts and kEmbedding: the LM head) is stored as bf16 or
// fp8, else kF32. Never returns kAuto.
Precision ResolvePrecision(Precision requested, const CheckpointReport& report,
                           const weights::Checkpoint& ckpt);

// Sets w.bf16_activations for bf16 compute: under kBf16 every linear weight loaded from the
// checkpoint, whatever its dtype (an f32 LM head too: transformers in bf16 feeds it bf16 hidden
// states), but int8 ones (`--quantize`: f32 activations for int8, int8 ones for w8a8). Routers,
// the DSA indexer's head weights and hyper-connection maps are held as f32 copies, not
// checkpoint weights, and keep f32 inputs.
void ApplyPrecision(Precision precision, kernels::WeightRef& w);

}  // namespace latent::model
