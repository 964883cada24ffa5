// A.X-K2 (axk2, SK Telecom): DeepSeek V3.2 (MLA with interleaved rope, a DSA indexer on every
// layer, sigmoid router) with
//  - one fused projection (the hub's q_b_proj) over [q_a_layernorm(q_a) | q_a] giving each head's
//    query and a per-channel output gate: the attention output times sigmoid(gate) before o_proj
//    (ops/output_gate.h; in both MLA forms);
//  - gated RMSNorms (ops/gated_norm.h) as the input norm of every layer and the post-attention
//    norm of sparse layers;
//  - optional expert groups: none by default (A.X-K2-Light); with n_group/topk_group, V3's
//    top-2-sum group mask, except that dropped experts compete with score 0 (not -inf).
#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"
#include "ops/gated_norm.h"

namespace latent::model {
namespace {

// transformers' AXK2Config defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 1,  // AXK2Config.__post_init__'s legacy default
          // Null fails there only without mlp_layer_types (DeriveMlpLayerTypes refuses it).
          .null_first_dense = NullFirstDense::kFailsWithoutLayerTypes,
          .n_group = 1,  // null (no groups): one group of all experts routes the same
          .topk_group = 1, .n_shared_experts = 1, .routed_scaling_factor = 2.5,
          .norm_topk_prob = true, .topk_methods = {TopkMethod::kNoauxTc},
          .scoring = ScoringFunc::kSigmoid, .max_position_embeddings = 131072,
          .rms_norm_eps = 1e-6, .bos = 163691, .eos = 163691};
}

// Rewrites what the common parser would read differently from AXK2Config:
//  - moe_layer_freq: honoured when AXK2Config derives mlp_layer_types (DeriveMlpLayerTypes);
//  - n_group / topk_group: both null (no groups) or both set, checked before the common parser
//    fills a missing one with the default.
void Prepare(Json& json, const std::string& source) {
  if (!json.is_object()) return;  // the common parser names the problem
  const ConfigReader top(json, source);
  if (top.Has("n_group") != top.Has("topk_group")) {
    Fail(source, ": n_group and topk_group must be set together (both null for routing without "
         "expert groups)");
  }
  DeriveMlpLayerTypes(json, source, Defaults().first_k_dense_replace);
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  config.rope_interleave = true;  // AXK2Attention always rotates adjacent pairs.
  config.router_dropped_groups_score_zero = true;
  ParseIndexedLayerTypes(top, config);
  ParseDsaIndexer(top, config, /*default_heads=*/16);  // also requires q_lora_rank
  config.gated_norm_rank = top.IntOr("gated_norm_rank", 16);
  if (config.gated_norm_rank <= 0 || config.gated_norm_rank > kMaxConfigSize) {
    Fail(top.source(), ": 'gated_norm_rank' must be positive, got ", config.gated_norm_rank);
  }
}

// Every tensor, in checkpoint order; with `w`, where each one loads.
void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w,
                   const TensorVisitor& visit) {
  DeepseekTensors t(c, layout, w, visit);
  t.Embedding();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    t.GatedInputNorm(l);
    t.MlaAttention(l, MlaQuery::kFusedOutputGate);
    t.DsaIndexer(l);
    if (c.IsMoeLayer(l)) {
      t.GatedPostAttentionNorm(l);
      t.Moe(l);
    } else {
      t.PostAttentionNorm(l);
      t.DenseMlp(l);
    }
  }
  t.FinalNorm();
  t.LmHead();
}

// Every layer caches its MLA latent row and its indexer's key.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  return cache::ModelCacheRows(c.num_hidden_layers, {MlaLatentRow(c, dtype), DsaIndexKeyRow(c, dtype)});
}

class Axk2 final : public DeepseekModel {
 public:
  Axk2(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options,
                      /*index_rope_interleaved=*/false) {}

  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override {
    LATENT_PROFILE_SCOPE(kStep);
    Activations a = Start(batch);
    Embed(batch, a.hidden);
    DsaSelection selection;  // [T] the positions each token attends to, from this layer's indexer
    if (trace != nullptr) trace->selected.assign(config().num_hidden_layers, {});
    for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
      const LayerWeights& w = layer(l);
      Norm(a.hidden, a.tokens, w.input_norm, w.input_norm_gate, a.normed);
      MlaAttention(l, batch, a.normed, form, &selection, a.branch);
      if (trace != nullptr) trace->selected[l] = selection;
      AddResidual(a.hidden, a.branch, a.tokens);
      Norm(a.hidden, a.tokens, w.post_attention_norm, w.post_attention_norm_gate,
           a.normed);
      FeedForward(l, a.normed, a.tokens, a.branch, trace);
      AddResidual(a.hidden, a.branch, a.tokens);
      dump::Tensor("hidden", l, a.hidden, a.tokens, config().hidden_size);
    }
    Head(batch, a.hidden, logits);
  }

 private:
  // out [T, D] = the gated RMSNorm of x when the norm has a gate, else the plain one.
  void Norm(const float* x, int64_t tokens, const NormWeight& norm,
            const std::optional<NormGateWeights>& gate, float* out) const {
    if (!gate) return RmsNorm(x, tokens, norm, out);
    LATENT_PROFILE_SCOPE(kNorm);
    ops::GatedRmsNorm(x, tokens, config().hidden_size, norm, *gate,
                      static_cast<float>(config().rms_norm_eps), out);
  }
};

Arch Make() {
  return WithModel<Axk2, ForEachTensor>(
      {.name = "axk2", .model_types = {"axk2"}, .defaults = Defaults(), .prepare = Prepare,
       .parse = Parse, .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(120, Make);

}  // namespace latent::model
