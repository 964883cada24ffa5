// Views of a DeepSeek-family checkpoint's weights, pointing into the mapped files (no copies,
// except the small router tensors, which transformers also keeps in f32), or into buffers of
// weights converted at load (`--quantize int8`, model/weight_quantization.h).
#pragma once

#include <optional>
#include <vector>

#include "kernels/weight_ref.h"
#include "model/load_options.h"
#include "model/model_config.h"
#include "model/weight_quantization.h"
#include "ops/gated_norm.h"
#include "ops/hyper_connections.h"
#include "ops/dsa_indexer.h"
#include "ops/kda.h"
#include "ops/mla_attention.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/position_scale.h"
#include "weights/checkpoint.h"

namespace latent::model {

using ops::AttentionWeights;
using ops::IndexerWeights;
using ops::MlpWeights;
using ops::MoeWeights;
using ops::NormGateWeights;
using ops::NormWeight;

struct LayerWeights {
  NormWeight input_norm, post_attention_norm;
  AttentionWeights attention;
  std::optional<IndexerWeights> indexer;
  std::optional<MlpWeights> dense;  // Dense layers
  std::optional<MoeWeights> moe;    // MoE layers
  NormWeight post_mlp_norm;         // [D] A.X-K1: RMSNorm of the MoE output (sparse layers)
  // A.X-K2's gated RMSNorms (ops/gated_norm.h): the gates of input_norm / post_attention_norm.
  std::optional<NormGateWeights> input_norm_gate, post_attention_norm_gate;
  // Hy4's hyper-connections around the attention and the feed-forward block.
  std::optional<ops::HyperConnectionWeights> attn_hc, ffn_hc;
  // A KDA linear-attention layer's weights, in place of `attention` (hybrid models).
  std::optional<ops::KdaWeights> kda;
};

struct DeepseekWeights {
  kernels::WeightRef embed;  // [V, D]
  std::vector<LayerWeights> layers;
  NormWeight final_norm;
  kernels::WeightRef lm_head;  // [V, D]
  // LeRoPE (mistral_large4): learned per-frequency log factors, inv_freq * exp(alpha); empty: none.
  std::vector<float> rope_alpha;  // [qk_rope_head_dim / 2]
  // Hy4: the hyper-connection streams' collapse before the final norm; absent elsewhere.
  std::optional<ops::HyperHeadWeights> hc_head;
  OwnedWeights owned;          // Buffers of the weights converted at load.
  int64_t bytes = 0;           // Bytes of all the weights as held (as LoadedWeightBytes counts).
  // The linears' precision (LoadOptions::precision resolved; never kAuto): under kBf16 the
  // bf16, f16 and fp8 linear weights carry bf16_activations (model/precision.h).
  Precision precision = Precision::kF32;
};

// Validates `ckpt` against `config` and builds the views by walking the family's tensor list
// (`tensors`: its arch file's ForEachTensor), converting the weights as each entry's rule and
// `options` ask (and logging what was done on stderr). Throws latent::Error.
using DeepseekTensorList = void (*)(const ModelConfig& config, ExpertLayout layout,
                                    DeepseekWeights* weights, const TensorVisitor& visit);
DeepseekWeights LoadDeepseekWeights(const ModelConfig& config, const weights::Checkpoint& ckpt,
                                    DeepseekTensorList tensors, const LoadOptions& options = {});

// LATENT_KEY_FOLD=transposed: the loader makes no transposed, packed copies of W_UK (the absorbed
// form folds over kv_b's rows as stored; for tests and A/B runs). Unset or empty: false; any
// other value throws latent::Error naming the variable (main reads it at start).
bool KeyFoldTransposed();

}  // namespace latent::model
