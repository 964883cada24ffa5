// The pieces DeepSeek-like families list their tensors with (MLA attention, DSA indexer, dense
// MLP, MoE, embedding and head). An arch file's ForEachTensor composes them in checkpoint order;
// given weights, each entry also says where loading puts the tensor.
#pragma once

#include <optional>
#include <string>

#include "model/deepseek_weights.h"
#include "model/weight_table.h"

namespace latent::model {

// How an MLA's query projection is stored: q_b_proj alone, or (A.X-K2) q_b_proj also holding
// the output gate's rows, over [q_a_layernorm(q_a) | q_a] (AttentionWeights::q_gate).
enum class MlaQuery : uint8_t { kPlain, kFusedOutputGate };

// How a family names a MoE's pieces under its prefix (DeepSeek's names by default).
struct MoeNames {
  const char* score_bias = "gate.e_score_correction_bias";  // noaux_tc's correction bias
  // A routed expert's projections, under "experts.<e>." (Kimi: w1, w3, w2).
  const char* gate = "gate_proj";
  const char* up = "up_proj";
  const char* down = "down_proj";
};

class DeepseekTensors {
 public:
  // `weights` null: listing only (validation, counting). Otherwise its layers are sized here and
  // every entry targets its slot in them. `slots`: how many LayerWeights (-1: one per layer;
  // LongCat holds two per layer, one per sublayer).
  DeepseekTensors(const ModelConfig& config, ExpertLayout layout, DeepseekWeights* weights,
                  const TensorVisitor& visit, int64_t slots = -1);

  void Embedding();                 // model.embed_tokens.weight
  void InputNorm(int64_t layer);    // input_layernorm
  // self_attn: q (LoRA or not), kv_a, kv_a_layernorm, kv_b, o
  void MlaAttention(int64_t layer, MlaQuery query = MlaQuery::kPlain);
  void DsaIndexer(int64_t layer);   // self_attn.indexer: wq_b, wk, k_norm, weights_proj
  void PostAttentionNorm(int64_t layer);
  void DenseMlp(int64_t layer);     // mlp.{gate,up,down}_proj
  // mlp.gate (+ correction bias, which `score_bias` may make optional), experts, shared experts.
  void Moe(int64_t layer, Presence score_bias = Presence::kRequired);
  // A.X-K1: post_mlp_layernorm; `used` false where transformers drops it (dense layers).
  void PostMlpNorm(int64_t layer, bool used);
  // A.X-K2's gated RMSNorms (ops/gated_norm.h), under the hub's names: <norm>.norm.weight [D],
  // <norm>.W_down.weight [r, D], <norm>.W_up.weight [D, r] (transformers' mlp.fc1 / mlp.fc2).
  void GatedInputNorm(int64_t layer);
  void GatedPostAttentionNorm(int64_t layer);
  void FinalNorm();                 // model.norm.weight
  void LmHead();                    // lm_head.weight (kTiedHead when tied to the embedding)

  // The pieces under explicit names, loading into LayerWeights `slot` (LongCat's sublayers).
  void MlaAttentionAt(int64_t slot, const std::string& prefix,  // "model.layers.3.self_attn.1."
                      MlaQuery query = MlaQuery::kPlain);
  void InputNormAt(int64_t slot, const std::string& name);        // "...input_layernorm.1.weight"
  void PostAttentionNormAt(int64_t slot, const std::string& name);
  void DenseMlpAt(int64_t slot, const std::string& prefix);       // "model.layers.3.mlps.1."
  // A MoE under `prefix` ("model.layers.3.block_sparse_moe.") with the family's `names`: router
  // gate.weight (+ the correction bias under noaux_tc), the routed experts one by one or fused
  // as the layout says, the shared experts.
  void MoeAt(int64_t slot, const std::string& prefix, const MoeNames& names = {},
             Presence score_bias = Presence::kRequired);
  // KDA linear attention with the low-rank forget and output gates (kimi_linear, glm5_next) under
  // `prefix` ("model.layers.0.self_attn."): {q,k,v}_proj, {q,k,v}_conv1d, A_log (stored as
  // `a_log_shape`), dt_bias, f_a_proj, f_b_proj, b_proj, g_a_proj, g_b_proj, o_norm, o_proj.
  void KdaAttentionAt(int64_t slot, const std::string& prefix, Shape a_log_shape);
  // A hyper-connection's fn, base and scale under `prefix` ("model.layers.0.hc_attn_"): pre and
  // post gates of hc_mult streams, plus mHC's comb when the config mixes them (Sinkhorn).
  void HyperConnection(const std::string& prefix, std::optional<ops::HyperConnectionWeights>* target);

  // The primitives the pieces are made of, for a family's own tensors. Each entry targets its
  // slot when loading (null target: listing only).
  LayerWeights* Layer(int64_t slot) const;
  void Add(std::string name, Shape shape, WeightKind kind, QuantizeRule rule, TensorTarget target,
           Presence presence = Presence::kRequired);
  // A linear layer's weight.
  void Linear(const std::string& name, Shape shape, kernels::WeightRef* target,
              QuantizeRule rule = QuantizeRule::kWeightsAndActivations);
  void Norm(const std::string& name, int64_t width, NormWeight* target);
  // A small parameter transformers keeps in f32 (convolution taps, gate constants,
  // hyper-connections), loaded as f32 and never quantized, like a router.
  void F32(const std::string& name, Shape shape, std::vector<float>* target);
  // dense MLP weights gate_proj, up_proj, down_proj under `prefix`.
  void Mlp(const std::string& prefix, int64_t inter, ops::MlpWeights* target);
  // The routed expert the entries listed next belong to (ExpectedWeight::expert); -1: none.
  void SetExpert(int64_t expert) { expert_ = expert; }

  // LongCat's MoE under `prefix` ("model.layers.3.mlp."): router.classifier [E+Z, D] (its bias,
  // with router_bias, unused as in transformers), router.e_score_correction_bias [E+Z], the E
  // routed experts, and the gate/up rows transformers allocates for the Z identity experts
  // (kUnused: counted, optional, never loaded).
  void ZeroExpertMoeAt(int64_t slot, const std::string& prefix);

 private:
  void GatedNorm(const std::string& prefix, NormWeight* norm, std::optional<NormGateWeights>* gate);

  const ModelConfig& c_;
  ExpertLayout layout_;
  DeepseekWeights* w_;
  const TensorVisitor& visit_;
  int64_t expert_ = -1;  // The routed expert being listed (ExpectedWeight::expert), else -1.
};

}  // namespace latent::model
