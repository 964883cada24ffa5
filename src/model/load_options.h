// How a model is loaded, beyond its checkpoint: weight quantization at load (`--quantize`).
#pragma once

#include <cstdint>
#include <string>

namespace latent::model {

enum class WeightQuantization : uint8_t {
  kNone,  // Weights as stored in the checkpoint (f32, bf16, f16 or fp8 blocks).
  // Every linear weight of the decoder (attention projections, dense MLP, shared and routed
  // experts, lm_head) converted to int8 with one f32 scale per output row (symmetric,
  // scale = max |w_row| / 127, round to nearest even). Embeddings, norms, the router and the DSA
  // indexer stay as stored.
  kInt8,
};

struct LoadOptions {
  WeightQuantization quantize = WeightQuantization::kNone;
};

// "none" or "int8"; throws latent::Error ("--quantize: unknown mode ...") for anything else.
WeightQuantization ParseWeightQuantization(const std::string& name);
const char* WeightQuantizationName(WeightQuantization quantize);

}  // namespace latent::model
