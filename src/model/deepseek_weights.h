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
#include "ops/kda.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/position_scale.h"
#include "weights/checkpoint.h"

namespace latent::model {

using ops::MlpWeights;
using ops::MoeWeights;
using ops::NormGateWeights;
using ops::NormWeight;

struct AttentionWeights {
  std::optional<kernels::WeightRef> q_proj;  // [H*dqk, D] when q_lora_rank is null
  std::optional<kernels::WeightRef> q_a;     // [Q, D]
  NormWeight q_a_norm;                       // [Q]
  std::optional<kernels::WeightRef> q_b;     // [H*dqk, Q]
  // A.X-K2's fused query and output gate, in place of q_b: [H*(dqk+dv), 2Q] over
  // [q_a_layernorm(q_a) | q_a], per head dqk query rows then dv gate rows (ops/output_gate.h).
  std::optional<kernels::WeightRef> q_gate;
  kernels::WeightRef kv_a;                   // [C+R, D]
  NormWeight kv_a_norm;                      // [C]
  kernels::WeightRef kv_b;                   // [H*(dn+dv), C]: per head dn k_nope rows, dv v rows
  kernels::WeightRef o;                      // [D, H*dv]
  // Learned log-position query scaling (mistral_large4's ssmax_scaling), after rope; empty where
  // none.
  ops::LogPositionScale query_scale;  // [H]
  // dots3_note: RMSNorm of the rotary key before rope (k_rope_only_layernorm) [dr], data null:
  // none.
  NormWeight k_rope_norm;
  // The output gate logits from the layer input (Hy4, dots3_note's g_proj): [H*w, D], w = dv (per
  // channel) or 1 (per head); applied as sigmoid before o_proj (ops/output_gate.h). Absent elsewhere.
  std::optional<kernels::WeightRef> gate_proj;
  // Hy4's learned attention-sink logit per head (kernels/attention.h), f32; empty: none.
  std::vector<float> sinks;  // [H]
};

// DeepSeek sparse attention's indexer (layers that run one).
struct IndexerWeights {
  kernels::WeightRef wq_b;          // [n_h * d_i, Q]
  kernels::WeightRef wk;            // [d_i, D]
  NormWeight k_norm, k_norm_bias;   // [d_i] LayerNorm weight and bias
  std::vector<float> weights_proj;  // [n_h, D] f32, as transformers keeps it
  // mistral_large4: queries from LayerNorm(x) (weight and bias [D]) instead of the query latent,
  // so wq_b is [n_h * d_i, D]; data null elsewhere.
  NormWeight q_norm, q_norm_bias;
  ops::LogPositionScale query_scale;  // [n_h], before rope; empty: none
  // GLM-5-Next's KPool indexer (ops/kpool.h): the gate score projection and the positional
  // term of the pool softmax; empty elsewhere.
  kernels::WeightRef kpool_gate;   // [d_i, D]
  std::vector<float> kpool_ape;    // [index_kpool, d_i]
};

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

}  // namespace latent::model
