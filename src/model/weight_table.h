// The tensors a checkpoint must hold for a given config: each family lists them ONCE, in its arch
// file (ForEachTensor, in the style of gemma.cpp), with name, shape, kind, what --quantize does
// with it and, when loading, where it goes. That one list validates a checkpoint, counts its
// parameters as transformers does, loads it and drives --quantize.
#pragma once

#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "kernels/weight_ref.h"
#include "model/model_config.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "tensor/tensor_view.h"
#include "weights/checkpoint.h"

namespace latent::model {

// "model.layers.<layer>.": where a decoder layer's tensors are named in a checkpoint.
std::string LayerPrefix(int64_t layer);

enum class WeightKind : uint8_t {
  kLinear,     // A projection matrix [out, in]; FP8 checkpoints store these quantized.
  kExperts,    // Fused experts tensor [E, out, in] (transformers' in-memory layout).
  kEmbedding,  // embed_tokens / lm_head: never quantized.
  kNorm,       // RMSNorm weight.
  kRouter,     // mlp.gate.weight: f32, never quantized.
  kBuffer,     // e_score_correction_bias: a buffer, not a parameter.
  // A parameter transformers allocates but never reads (LongCat's zero experts' gate/up rows, its
  // unused router bias): counted as transformers counts it, optional in a checkpoint, not loaded.
  kUnused,
};

// What `--quantize int8|w8a8` does with a tensor.
enum class QuantizeRule : uint8_t {
  kKeep,                  // Stays as stored (norms, routers, the DSA indexer, the embedding).
  kWeights,               // int8 weights; activations stay f32 even under w8a8 (kv_b_proj).
  kWeightsAndActivations, // int8 weights; w8a8 also quantizes the activations.
};

// Where loading puts a tensor: a view of a linear weight, a norm weight, an f32 copy (routers,
// buffers), or one part of fused experts [E, out, in] sliced into each expert's MlpWeights.
struct FusedExperts {
  std::vector<ops::MlpWeights>* experts = nullptr;
  bool gate_up = true;  // gate_up_proj [E, 2I, D] (else down_proj [E, D, I])
};
using TensorTarget = std::variant<std::monostate, kernels::WeightRef*, ops::NormWeight*,
                                  std::vector<float>*, FusedExperts>;

// Whether a checkpoint must hold a tensor.
enum class Presence : uint8_t {
  kRequired,
  kOptional,  // Loaded when present; else its target stays empty (A.X-K1's score correction bias).
  kUnused,    // Accepted (shape-checked) when present, never loaded nor counted: a tensor the
              // checkpoint stores but transformers drops (A.X-K1's dense-layer post_mlp_layernorm).
  // The LM head of a config with tie_word_embeddings: the embedding serves as the head unless the
  // checkpoint stores a head with values of its own, which is then loaded and counted, as
  // transformers' tie_weights unties a stored pair that differs. Absent, or a byte-for-byte copy
  // of the embedding: not listed in the report (LmHeadTied), nor by ConfigWeights. A head stored
  // without the embedding is the embedding (OpenCheckpoint), so the pair is tied.
  kTiedHead,
};

struct ExpectedWeight {
  std::string name;
  Shape shape;
  WeightKind kind;
  QuantizeRule quantize = QuantizeRule::kKeep;
  TensorTarget target;  // monostate when only listing
  Presence presence = Presence::kRequired;
  // The routed expert a per-expert tensor belongs to (mlp.experts.{e}.*), else -1: expert
  // parallelism loads only its rank's experts (ExpertShard).
  int64_t expert = -1;
};

// How the routed experts of MoE layers are stored.
enum class ExpertLayout : uint8_t {
  kPerExpert,  // mlp.experts.{e}.{gate,up,down}_proj.weight (released checkpoints)
  kFused,      // mlp.experts.gate_up_proj [E, 2I, D], mlp.experts.down_proj [E, D, I]
};

using TensorVisitor = std::function<void(const ExpectedWeight&)>;

// Every tensor the config implies, in checkpoint naming: the config's family's list (its arch
// file), without targets.
std::vector<ExpectedWeight> ExpectedWeights(const ModelConfig& config, ExpertLayout layout);

// Whether an fp8 checkpoint may store this tensor as fp8 e4m3 blocks with a weight_scale_inv:
// linear weights and experts (not embeddings, the LM head, norms, routers or buffers).
// ValidateCheckpoint accepts fp8 only there; a checkpoint estimated from config.json alone
// (StoredDType::kFP8Block) stores exactly these as fp8.
bool Fp8Eligible(const ExpectedWeight& w);

// The tensors a complete checkpoint of `config` holds that latent counts or loads, in per-expert
// layout (as released checkpoints store experts): ExpectedWeights without kUnused-presence
// entries (stored but dropped) and kTiedHead ones (a tied head is the embedding), kOptional ones
// taken as present. What `latent info` counts on a directory holding only config.json.
std::vector<ExpectedWeight> ConfigWeights(const ModelConfig& config);

// Whether the LM head is the embedding: config.json ties them and `weights` (a CheckpointReport's,
// or ConfigWeights) lists no kTiedHead entry, i.e. the checkpoint stores no head of its own.
bool LmHeadTied(const ModelConfig& config, const std::vector<ExpectedWeight>& weights);

// Parameters as transformers' num_parameters() counts them: every weight but buffers, with
// FP8 weights counted by their logical elements (scales excluded), tied embeddings once.
int64_t CountParameters(const std::vector<ExpectedWeight>& weights);

struct CheckpointReport {
  ExpertLayout expert_layout = ExpertLayout::kPerExpert;
  std::vector<ExpectedWeight> weights;
  // Tensors the model never reads, as transformers ignores them silently: MTP layers
  // (model.layers.{L .. L + num_mtp_layers - 1}, model.mtp.*, model.mtp_layers.*) and rotary
  // inv_freq buffers.
  std::vector<std::string> ignored;
  // Tensors nothing in the config explains (a stray tensor, layers past num_hidden_layers and
  // its MTP layers): not loaded either, but loading warns (UnusedTensorsWarning), as transformers
  // warns of unexpected keys.
  std::vector<std::string> unused;
};

// The one line loading prints on stderr when `report` holds unused tensors (their count and the
// first few names), else "".
std::string UnusedTensorsWarning(const CheckpointReport& report, const std::string& dir);

// The checkpoint in `dir` as `config` reads it: for a vision-language wrapper (config.
// wrapper_model_type), only its language model's tensors, under the text model's names
// (language_model.model.* or model.language_model.* as model.*, language_model.lm_head.* or
// lm_head.* as lm_head.*). With tie_word_embeddings and only the LM head stored, the head is the
// embedding too (as transformers ties them): held under the embedding's name as well.
// Throws latent::Error when it holds neither form.
weights::Checkpoint OpenCheckpoint(const ModelConfig& config, const std::string& dir);

// Checks that `ckpt` holds every expected tensor (report.weights: those it holds and latent loads,
// without kOptional ones it lacks, kUnused ones, and a kTiedHead it lacks or stores as a copy of
// the embedding) with the expected shape (and, for FP8 configs,
// a float8 weight with a weight_scale_inv of [ceil(N/bn), ceil(K/bk)]). Throws latent::Error
// naming the first missing or misshapen tensor.
CheckpointReport ValidateCheckpoint(const ModelConfig& config, const weights::Checkpoint& ckpt);

}  // namespace latent::model
