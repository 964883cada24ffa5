// ModelConfig: the plain fields of a checkpoint's config.json that the forward pass needs.
// Parsed once; every later stage reads these fields and never the JSON. The common keys are read
// here (model_config.cc); each family's own defaults, aliases and keys are read by its arch file
// (arch/<family>.cc), found through the registry by model_type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/moe_route.h"
#include "ops/rope_config.h"

namespace latent::model {

using ops::RopeConfig;
using ops::RopeType;
using ops::ScoringFunc;
using ops::TopkMethod;
using ops::ScoringFuncName;
using ops::TopkMethodName;

struct QuantizationConfig {
  bool fp8 = false;                  // quant_method "fp8", fmt e4m3
  int64_t block_n = 0, block_k = 0;  // weight_block_size: scales cover block_n rows x block_k cols
  std::string activation_scheme;     // "dynamic" (the only one accepted)
  std::string scale_fmt;             // "" (absent or null), "float" or "ue8m0"
};

// One layer's MLA shape where it differs from the model's (dots3_note's sliding-window layers have
// their own head count, query and latent ranks and head dims).
struct MlaLayerShape {
  int64_t num_attention_heads = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

struct ModelConfig {
  std::string model_type;    // As written in config.json ("kimi_k2" stays "kimi_k2").
  std::string architecture;  // The family (arch/) that reads it: "deepseek_v3" for kimi_k2.

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // Dense MLP layers.
  int64_t num_hidden_layers = 0;  // Without MTP layers, which latent does not load.
  // The MTP layers a checkpoint may store after the decoder's, as model.layers.{num_hidden_layers
  // + i}.* (num_nextn_predict_layers, or transformers' num_mtp_layers): never loaded, and their
  // tensors ignored without a warning, unlike other tensors the config does not explain.
  int64_t num_mtp_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";

  // Multi-head latent attention.
  std::optional<int64_t> q_lora_rank;  // nullopt: q_proj straight from hidden (V2-Lite).
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool rope_interleave = true;  // Rotary pairs are adjacent (2i, 2i+1), not split in halves.
  RopeConfig rope;
  // LongCat's LoRA scales: the query (nope and rope parts) times mla_q_scale, the normalised latent
  // times mla_latent_scale before it is cached (the rotary key is not scaled). 1 elsewhere.
  double mla_q_scale = 1.0;
  double mla_latent_scale = 1.0;

  // Mixture of experts.
  int64_t n_routed_experts = 0;  // 0: every layer dense.
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  int64_t first_k_dense_replace = 0;
  TopkMethod topk_method = TopkMethod::kGreedy;
  ScoringFunc scoring_func = ScoringFunc::kSoftmax;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  // LongCat's zero-computation experts: the router scores n_routed_experts + zero_expert_num
  // experts; the chosen ones at indices >= n_routed_experts add weight * x (identity).
  int64_t zero_expert_num = 0;
  bool router_bias = false;  // LongCat's router_bias: its classifier has a bias (never added).
  // noaux_tc: experts of the groups not kept compete with score 0, not -inf (A.X-K2's router).
  bool router_dropped_groups_score_zero = false;

  // DeepSeek sparse attention (deepseek_v32, glm_moe_dsa); index_topk == 0 means none.
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  // Per layer: runs its own indexer (GLM's IndexShare "shared" layers reuse the previous
  // layer's selection and hold no indexer weights). Empty without DSA.
  std::vector<bool> indexer_layers;

  // Per layer: MoE ("sparse") or dense MLP, from mlp_layer_types or first_k_dense_replace.
  std::vector<bool> moe_layers;

  // A.X-K2's gated RMSNorms: the rank of their gate MLP (gated_norm_rank); 0 elsewhere.
  int64_t gated_norm_rank = 0;

  // Llama-4 query scaling (mistral4): q *= 1 + beta * ln(1 + floor(position / positions)) after
  // rope; beta 0: none.
  double llama_4_scaling_beta = 0.0;
  int64_t llama_4_scaling_positions = 1;
  // A vision-language wrapper's model_type ("mistral3") when config.json holds this model under
  // text_config: the checkpoint's tensors are the wrapper's language model's (OpenCheckpoint).
  std::string wrapper_model_type;
  // muP scalings (MiniCPM3; 1 elsewhere): embeddings times embedding_scale, each residual branch
  // times residual_scale, the final hidden state divided by logits_divisor before the LM head.
  double embedding_scale = 1.0;
  double residual_scale = 1.0;
  double logits_divisor = 1.0;

  // NoPE layers and KV sharing (mistral_large4; empty elsewhere: every layer rotates
  // qk_rope_head_dim dims and caches its own latent). rope_layers[l] false: the layer has no
  // rotary part (its latent row is kv_lora_rank values, its heads qk_head_dim nope dims).
  // kv_source_layers[l] != l: the layer computes no latent and attends to the rows of that
  // earlier layer, which owns them.
  std::vector<bool> rope_layers;
  std::vector<int64_t> kv_source_layers;
  // Hybrid models (kimi_linear): per layer, a KDA linear-attention layer (true) instead of MLA;
  // empty elsewhere. Its heads, head dim and short-convolution taps.
  std::vector<bool> linear_attention_layers;
  int64_t linear_num_heads = 0;
  int64_t linear_head_dim = 0;
  int64_t linear_conv_kernel = 4;
  // The KDA forget gate's lower bound when it is the safe (bounded) gate, g = b * sigmoid(...)
  // (bailing_hybrid's kda_safe_gate + kda_lower_bound, glm5_next's linear_lower_bound);
  // nullopt: Kimi's -exp(A_log) * softplus(f + dt_bias).
  std::optional<double> linear_gate_lower_bound;
  // logits = cap * tanh(logits / cap) after the LM head; 0: none.
  double final_logit_softcapping = 0.0;

  // Sliding-window attention (dots3_note; empty elsewhere): sliding_layers[l] true: the layer's
  // token at position p attends only to positions (p - sliding_window, p], with its own rotary
  // settings (sliding_rope) and, where mla_layer_shapes has an entry, its own MLA shape.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  // A DSA model with MLA layers that do not attend a selection (dots3_note's full_attention and
  // sliding_attention layers): their tokens attend the whole causal prefix or window, so a long
  // prompt stays expanded there past the point where the selecting layers switch to the absorbed
  // form (ExpandedPositions). In the other DSA families every MLA layer selects or reuses a
  // selection.
  bool dsa_causal_layers = false;
  RopeConfig sliding_rope;
  // Per layer: the layer's MLA shape, or empty (every layer has the top-level dims).
  std::vector<MlaLayerShape> mla_layer_shapes;
  // Intermediate size of each shared expert where it differs from moe_intermediate_size (0: same).
  int64_t shared_expert_intermediate_size = 0;
  // Hy4: hc_mult residual streams joined by hyper-connections (ops/hyper_connections.h); 0: one
  // plain residual stream. hc_magnitude scales the post gate, hc_eps is added to every gate.
  int64_t hc_mult = 0;
  double hc_magnitude = 2.0;
  double hc_eps = 1e-6;
  // The routed experts' SwiGLU clamp (Hy4's swiglu_limit); 0: none.
  double swiglu_limit = 0.0;
  // GLM-5-Next: swiglu_limit clamps every MLP (dense layers and shared experts too).
  bool swiglu_limit_all_mlps = false;
  // GLM-5-Next's mHC: the streams also mix through a Sinkhorn-normalised comb matrix, with this
  // many iterations; 0: no mixing (Hy4).
  int64_t hc_sinkhorn_iters = 0;
  // GLM-5-Next's KPool indexer: pools of index_kpool tokens (ops/kpool.h); 0: token-wise.
  int64_t index_kpool = 0;
  // Hy4's DSA indexer rotates the last qk_rope_head_dim dims of its heads (else the first) and
  // normalises its keys with eps rms_norm_eps (else 1e-6).
  bool index_rope_last = false;
  double index_k_norm_eps = 1e-6;

  QuantizationConfig quantization;
  std::string dtype;  // torch_dtype / dtype: "float32", "bfloat16", ...
  // config.json's bos_token_id (the family's class default where it is absent), as transformers'
  // config class holds it; `latent info` reports it and nothing generates from it.
  // generation_config.json's bos_token_id is deliberately not read: transformers' generate() uses
  // it only to start a sequence that has no input ids (and encoder-decoder decoding), and every
  // latent front refuses an empty prompt (Engine::Submit); the BOS a prompt starts with comes from
  // the tokenizer (tokenizer_config.json's bos_token and add_bos_token) and the chat template's
  // bos_token, as vLLM's does; vLLM reads generation_config.json for its sampling fields only.
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool IsMoeLayer(int64_t layer) const { return moe_layers[layer]; }
  bool is_dsa() const { return index_topk > 0; }
  bool HasIndexer(int64_t layer) const { return is_dsa() && indexer_layers[layer]; }
  // Rotary dims of layer `layer`'s heads and latent row: 0 on NoPE layers.
  int64_t RopeDims(int64_t layer) const {
    return rope_layers.empty() || rope_layers[layer] ? qk_rope_head_dim : 0;
  }
  // The layer whose latent rows layer `layer` attends to (itself unless it shares KV).
  int64_t KvSourceLayer(int64_t layer) const {
    return kv_source_layers.empty() ? layer : kv_source_layers[layer];
  }
  bool OwnsLatent(int64_t layer) const { return KvSourceLayer(layer) == layer; }
  bool IsSlidingLayer(int64_t layer) const { return !sliding_layers.empty() && sliding_layers[layer]; }
  // Layer `layer`'s MLA shape: its mla_layer_shapes entry, else the top-level dims.
  MlaLayerShape LayerShape(int64_t layer) const {
    if (!mla_layer_shapes.empty()) return mla_layer_shapes[layer];
    return {num_attention_heads, q_lora_rank.value_or(0), kv_lora_rank, qk_nope_head_dim,
            RopeDims(layer), v_head_dim};
  }
  bool IsLinearAttentionLayer(int64_t layer) const {
    return !linear_attention_layers.empty() && linear_attention_layers[layer];
  }

  // Parses config.json text; `source` names it in errors. Throws latent::Error for a missing or
  // contradictory field, and for an unknown model_type (listing the registered ones).
  static ModelConfig FromJson(const std::string& text, const std::string& source);
  // Reads DIR/config.json.
  static ModelConfig Load(const std::string& dir);
};

// The model_types of the registered families, in registration order:
// "deepseek_v2, deepseek_v3, kimi_k2, ...".
std::string SupportedModelTypes();

}  // namespace latent::model
