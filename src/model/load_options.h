// How a model is loaded, beyond its checkpoint: weight quantization at load (`--quantize`) and
// the precision of the linears (`--precision`).
#pragma once

#include <cstdint>
#include <string>

namespace latent::parallel {
class Communicator;
}  // namespace latent::parallel

namespace latent::model {

enum class WeightQuantization : uint8_t {
  kNone,  // Weights as stored in the checkpoint (f32, bf16, f16 or fp8 blocks).
  // Every linear weight of the decoder (attention projections, dense MLP, shared and routed
  // experts, lm_head) converted to int8 with one f32 scale per output row (symmetric,
  // scale = max |w_row| / 127, round to nearest even). Embeddings, norms, the router and the DSA
  // indexer stay as stored.
  kInt8,
  // The weights of kInt8, plus dynamic per-token int8 activations (W8A8): each linear's input row
  // is quantized at run time the same way (scale = max |x_row| / 127) and the dot products are
  // integer (AVX512-VNNI vpdpbusd where the CPU has it; kernels/weight_ref.h's row_sums). kv_b
  // keeps f32 activations (W8A16, as kInt8): absorbed MLA multiplies its halves into the query
  // and the attention output instead of the cached latents, so quantizing its input per row
  // would make the two attention forms compute different things.
  kW8A8,
};

// The arithmetic of the linears (`--precision`).
enum class Precision : uint8_t {
  // bf16 for checkpoints whose linear weights are bf16 or fp8 (any of them), f32 otherwise (f32
  // and f16 checkpoints); ResolvePrecision (model/precision.h) decides.
  kAuto,
  // bf16 compute, as vLLM, SGLang and llama.cpp run bf16 checkpoints: every linear over a
  // checkpoint weight rounds its input activations to bf16 and accumulates in f32
  // (kernels::WeightRef::bf16_activations; model/precision.h says which weights); the residual
  // stream, norms, attention, routers and logits stay f32. Batch invariant like f32.
  // AVX512_BF16 CPUs run the bf16 weights' products on vdpbf16ps.
  kBf16,
  // Every product in f32 over the weights as stored: transformers' f32 forward to ~1e-6.
  kF32,
};

// Expert parallelism: the routed experts rank `rank` of `ranks` holds, a contiguous range
// [Begin(E), End(E)) (rank r: [r E / N, (r + 1) E / N)). Everything else is held by every rank.
struct ExpertShard {
  int rank = 0;
  int ranks = 1;
  int64_t Begin(int64_t experts) const { return experts * rank / ranks; }
  int64_t End(int64_t experts) const { return experts * (rank + 1) / ranks; }
  bool Holds(int64_t expert, int64_t experts) const {
    return expert >= Begin(experts) && expert < End(experts);
  }
};

struct LoadOptions {
  WeightQuantization quantize = WeightQuantization::kNone;
  Precision precision = Precision::kAuto;
  // The processes the model runs on (parallel/communicator.h); null or size 1: this process
  // alone, holding every expert. Otherwise this rank loads only its ExpertShard's routed experts
  // and the MoE layers sum the ranks' partial outputs through it.
  parallel::Communicator* communicator = nullptr;
  ExpertShard Shard() const;
};

// "none", "int8" or "w8a8"; throws latent::Error ("--quantize: unknown mode ...") for anything else.
WeightQuantization ParseWeightQuantization(const std::string& name);
const char* WeightQuantizationName(WeightQuantization quantize);
// "auto", "bf16" or "f32"; throws latent::Error ("--precision: unknown ...") for anything else.
Precision ParsePrecision(const std::string& name);
const char* PrecisionName(Precision precision);

}  // namespace latent::model
