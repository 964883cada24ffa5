// Hy4 (hy_v4): V3.2-style DSA on every layer, with
//  - hyper-connections: hc_mult residual streams per token in f32; around each block a
//    hyper-connection collapses them into the block's input and adds the block's output back to
//    each stream with its own gate; the head collapses them once more before the final norm
//    (ops/hyper_connections.h);
//  - a learned attention-sink logit per head (kernels/attention.h), in both MLA forms;
//  - a per-channel output gate sigmoid(gate_proj(x)) on each head's output before o_proj;
//  - rotate-half rope (V3 YaRN mscale); the indexer rotates the LAST rope dims of its heads and
//    normalises its keys with eps rms_norm_eps;
//  - "full" indexer layers (layer 0 and every fourth from 1) whose top-k the "shared" layers
//    after them reuse (indexer_types);
//  - routed experts with a clamped SwiGLU (swiglu_limit), a dense first layer, f32 lm_head.
// Tensors under the names save_pretrained writes (the hub's, which transformers renames on
// load): layers.N.hc_pre.hc_{attn,mlp}_layer.hc_{fn,base,scale}, self_attn.linear_gate (the
// output gate), self_attn.learnable_sink_param, mlp.linear_gate / mlp.shared_experts.linear_gate
// (the MLPs' gate_proj), fused experts, model.hc_pre.hc_head.hc_head_{fn,base,scale}.
#include "model/arch/registry.h"
#include "model/hyper_connection_model.h"

namespace latent::model {
namespace {

// transformers' HYV4Config defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 1,
          .null_first_dense = NullFirstDense::kIgnored,  // the class never reads it
          .n_group = 1, .topk_group = 1, .n_shared_experts = 1,
          .routed_scaling_factor = 2.827, .norm_topk_prob = true,
          .topk_methods = {TopkMethod::kNoauxTc}, .scoring = ScoringFunc::kSigmoid,
          .max_position_embeddings = 262144, .rms_norm_eps = 1e-5, .bos = 120000, .eos = 120025};
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  const int64_t layers = config.num_hidden_layers;
  config.rope_interleave = false;  // rotate-half, in attention and indexer alike
  // Without mlp_layer_types transformers makes layer 0 dense and every later one MoE.
  if (!top.Has("mlp_layer_types")) {
    for (int64_t l = 0; l < layers; ++l) config.moe_layers[l] = l >= 1;
    if (config.n_routed_experts == 0 && layers > 1) {
      Fail(source, ": hy_v4 layers after the first are MoE (no mlp_layer_types), but n_routed_experts is 0");
    }
  }
  ParseIndexedLayerTypes(top, config);
  ParseDsaIndexer(top, config, /*default_heads=*/16, /*query_latent=*/true);
  if (top.Has("indexer_types")) {
    ParseIndexShare(top, config);
  } else {  // transformers' default: full at layer 0 and where (l - 1) % 4 == 0
    config.indexer_layers.clear();
    for (int64_t l = 0; l < layers; ++l) config.indexer_layers.push_back(l == 0 || (l - 1) % 4 == 0);
  }
  config.index_rope_last = true;
  config.index_k_norm_eps = config.rms_norm_eps;
  ParseHyperStreams(top, config);
  config.hc_magnitude = top.NumberOr("hc_magnitude", 2.0);
  // HYV4Config's docstring says values at or below zero disable the clamp, but HYV4Experts
  // clamps at the value whatever it is (at zero every routed expert outputs zeros): refuse what
  // the two disagree on rather than pick one.
  config.swiglu_limit = top.NumberOr("swiglu_limit", 10.0);
  if (!(config.swiglu_limit > 0)) {
    Fail(source, ": 'swiglu_limit' must be positive, got ", config.swiglu_limit,
         " (transformers' HYV4Config documents values <= 0 as disabling the clamp, but its "
         "experts clamp at them anyway)");
  }
}

// linear_gate (gate_proj), up_proj, down_proj under `p`.
void MlpTensors(const ModelConfig& c, const std::string& p, int64_t inter, ops::MlpWeights* w,
                DeepseekTensors& t) {
  const int64_t d = c.hidden_size;
  t.Linear(p + "linear_gate.weight", {inter, d}, w ? &w->gate : nullptr);
  t.Linear(p + "up_proj.weight", {inter, d}, w ? &w->up : nullptr);
  t.Linear(p + "down_proj.weight", {d, inter}, w ? &w->down : nullptr);
}

// The router, the fused experts (transformers' hub mapping for hy_v4 has no per-expert form) and
// the shared experts of layer l.
void MoeTensors(const ModelConfig& c, int64_t l, DeepseekTensors& t) {
  const std::string p = StrCat("model.layers.", l, ".mlp.");
  const int64_t e = c.n_routed_experts, i = c.moe_intermediate_size, d = c.hidden_size;
  MoeWeights* m = t.Layer(l) ? &t.Layer(l)->moe.emplace() : nullptr;
  if (m != nullptr) m->experts.resize(e);
  t.F32(p + "gate.weight", {e, d}, m ? &m->router : nullptr);
  t.Add(p + "gate.e_score_correction_bias", {e}, WeightKind::kBuffer, QuantizeRule::kKeep,
        m ? TensorTarget{&m->bias} : TensorTarget{});
  const auto fused = [&](bool gate_up) {
    return m ? TensorTarget{FusedExperts{&m->experts, gate_up}} : TensorTarget{};
  };
  constexpr auto kQuantized = QuantizeRule::kWeightsAndActivations;
  t.Add(p + "experts.gate_up_proj", {e, 2 * i, d}, WeightKind::kExperts, kQuantized, fused(true));
  t.Add(p + "experts.down_proj", {e, d, i}, WeightKind::kExperts, kQuantized, fused(false));
  if (c.n_shared_experts > 0) {
    MlpTensors(c, p + "shared_experts.", i * c.n_shared_experts, m ? &m->shared.emplace() : nullptr, t);
  }
}

// Every tensor under the names save_pretrained writes; with `w`, where each one loads.
void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w, const TensorVisitor& visit) {
  DeepseekTensors t(c, layout, w, visit);
  t.Embedding();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights* L = t.Layer(l);
    const std::string p = StrCat("model.layers.", l, ".");
    const int64_t h = c.num_attention_heads;
    AttentionWeights* at = L ? &L->attention : nullptr;
    t.HyperConnection(p + "hc_pre.hc_attn_layer.hc_", L ? &L->attn_hc : nullptr);
    t.HyperConnection(p + "hc_pre.hc_mlp_layer.hc_", L ? &L->ffn_hc : nullptr);
    t.InputNorm(l);
    t.MlaAttention(l);
    t.Linear(p + "self_attn.linear_gate.weight", {h * c.v_head_dim, c.hidden_size},
             at ? &at->gate_proj.emplace() : nullptr);
    t.F32(p + "self_attn.learnable_sink_param", {h}, at ? &at->sinks : nullptr);
    if (c.HasIndexer(l)) t.DsaIndexer(l);
    t.PostAttentionNorm(l);
    if (c.IsMoeLayer(l)) {
      MoeTensors(c, l, t);
    } else {
      MlpTensors(c, p + "mlp.", c.intermediate_size, L ? &L->dense.emplace() : nullptr, t);
    }
  }
  ops::HyperHeadWeights* head = w ? &w->hc_head.emplace() : nullptr;
  const std::string h = "model.hc_pre.hc_head.hc_head_";
  const int64_t n = c.hc_mult;
  t.F32(h + "fn", {n, n * c.hidden_size}, head ? &head->fn : nullptr);
  t.F32(h + "base", {n}, head ? &head->base : nullptr);
  t.F32(h + "scale", {1}, head ? &head->scale : nullptr);
  t.FinalNorm();
  t.LmHead();  // stored in f32 (transformers keeps lm_head in f32); --quantize may convert it
}

// Every layer caches its latent; a layer running its own indexer also caches its key.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  cache::ModelCacheRows rows(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    rows[l].push_back(MlaLatentRow(c, dtype, c.RopeDims(l)));
    if (c.HasIndexer(l)) rows[l].push_back(DsaIndexKeyRow(c, dtype));
  }
  return rows;
}

class HyV4 final : public HyperConnectionModel {
 public:
  HyV4(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : HyperConnectionModel(std::move(config), std::move(ckpt), ForEachTensor, options) {}
};

Arch Make() {
  return WithModel<HyV4, ForEachTensor>(
      {.name = "hy_v4", .model_types = {"hy_v4"}, .defaults = Defaults(), .parse = Parse,
       .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(125, Make);

}  // namespace latent::model
