// The pieces DeepSeek-like families list their tensors with (MLA attention, DSA indexer, dense
// MLP, MoE, embedding and head). An arch file's ForEachTensor composes them in checkpoint order;
// given weights, each entry also says where loading puts the tensor.
#pragma once

#include <string>

#include "model/deepseek_weights.h"
#include "model/weight_table.h"

namespace latent::model {

class DeepseekTensors {
 public:
  // `weights` null: listing only (validation, counting). Otherwise its layers are sized here and
  // every entry targets its slot in them. `slots`: how many LayerWeights (-1: one per layer;
  // LongCat holds two per layer, one per sublayer).
  DeepseekTensors(const ModelConfig& config, ExpertLayout layout, DeepseekWeights* weights,
                  const TensorVisitor& visit, int64_t slots = -1);

  void Embedding();                 // model.embed_tokens.weight
  void InputNorm(int64_t layer);    // input_layernorm
  void MlaAttention(int64_t layer); // self_attn: q (LoRA or not), kv_a, kv_a_layernorm, kv_b, o
  void DsaIndexer(int64_t layer);   // self_attn.indexer: wq_b, wk, k_norm, weights_proj
  void PostAttentionNorm(int64_t layer);
  void DenseMlp(int64_t layer);     // mlp.{gate,up,down}_proj
  // mlp.gate (+ correction bias, which `score_bias` may make optional), experts, shared experts.
  void Moe(int64_t layer, Presence score_bias = Presence::kRequired);
  // A.X-K1: post_mlp_layernorm; `used` false where transformers drops it (dense layers).
  void PostMlpNorm(int64_t layer, bool used);
  void FinalNorm();                 // model.norm.weight
  void LmHead();                    // lm_head.weight, unless tied to the embedding

  // The pieces under explicit names, loading into LayerWeights `slot` (LongCat's sublayers).
  void MlaAttentionAt(int64_t slot, const std::string& prefix);  // "model.layers.3.self_attn.1."
  void InputNormAt(int64_t slot, const std::string& name);        // "...input_layernorm.1.weight"
  void PostAttentionNormAt(int64_t slot, const std::string& name);
  void DenseMlpAt(int64_t slot, const std::string& prefix);       // "model.layers.3.mlps.1."
  // LongCat's MoE under `prefix` ("model.layers.3.mlp."): router.classifier [E+Z, D] (its bias,
  // with router_bias, unused as in transformers), router.e_score_correction_bias [E+Z], the E
  // routed experts, and the gate/up rows transformers allocates for the Z identity experts
  // (kUnused: counted, optional, never loaded).
  void ZeroExpertMoeAt(int64_t slot, const std::string& prefix);

 private:
  LayerWeights* Layer(int64_t layer) const;
  void Add(std::string name, Shape shape, WeightKind kind, QuantizeRule rule, TensorTarget target,
           Presence presence = Presence::kRequired);
  void Mlp(const std::string& prefix, int64_t inter, ops::MlpWeights* target);

  const ModelConfig& c_;
  ExpertLayout layout_;
  DeepseekWeights* w_;
  const TensorVisitor& visit_;
};

}  // namespace latent::model
