// The tensors a DeepSeek-family checkpoint must hold for a given config, with their shapes.
// Used to validate a checkpoint before loading and to count parameters as transformers does.
#pragma once

#include <string>
#include <vector>

#include "model/model_config.h"
#include "tensor/tensor_view.h"
#include "weights/checkpoint.h"

namespace latent::model {

enum class WeightKind : uint8_t {
  kLinear,     // A projection matrix [out, in]; FP8 checkpoints store these quantized.
  kExperts,    // Fused experts tensor [E, out, in] (transformers' in-memory layout).
  kEmbedding,  // embed_tokens / lm_head: never quantized.
  kNorm,       // RMSNorm weight.
  kRouter,     // mlp.gate.weight: f32, never quantized.
  kBuffer,     // e_score_correction_bias: a buffer, not a parameter.
};

struct ExpectedWeight {
  std::string name;
  Shape shape;
  WeightKind kind;
};

// How the routed experts of MoE layers are stored.
enum class ExpertLayout : uint8_t {
  kPerExpert,  // mlp.experts.{e}.{gate,up,down}_proj.weight (released checkpoints)
  kFused,      // mlp.experts.gate_up_proj [E, 2I, D], mlp.experts.down_proj [E, D, I]
};

// Every tensor the config implies, in checkpoint naming.
std::vector<ExpectedWeight> ExpectedWeights(const ModelConfig& config, ExpertLayout layout);

// Parameters as transformers' num_parameters() counts them: every weight but buffers, with
// FP8 weights counted by their logical elements (scales excluded), tied embeddings once.
int64_t CountParameters(const std::vector<ExpectedWeight>& weights);

struct CheckpointReport {
  ExpertLayout expert_layout = ExpertLayout::kPerExpert;
  std::vector<ExpectedWeight> weights;
  std::vector<std::string> ignored;  // MTP layers (model.layers.{L..}) latent never loads.
  std::vector<std::string> unused;   // Tensors nothing in the config explains.
};

// Checks that `ckpt` holds every expected tensor with the expected shape (and, for FP8 configs,
// a float8 weight with a weight_scale_inv of [ceil(N/bn), ceil(K/bk)]). Throws latent::Error
// naming the first missing or misshapen tensor.
CheckpointReport ValidateCheckpoint(const ModelConfig& config, const weights::Checkpoint& ckpt);

}  // namespace latent::model
