// GLM-5-Next (glm5_next; GLM-5.3-Flash): a hybrid of KDA linear-attention layers
// (model/kda_attention.h) and DSA MLA layers, KDA on l % 4 != 3 by default, with
//  - no rotary part anywhere (qk_rope_head_dim 0): the MLA latent row is kv_lora_rank values;
//  - KDA's bounded forget gate lower_bound * sigmoid(exp(A_log) * (f + dt_bias))
//    (linear_lower_bound, -5; null: Kimi's softplus form);
//  - mHC residual streams (hc_mult, 4): around each block a hyper-connection collapses the
//    streams into the block's input (pre gates) and writes post * output + comb^T streams back,
//    comb Sinkhorn-normalised (ops/hyper_connections.h); the head takes the streams' mean;
//  - the KPool DSA indexer (model/kpool_indexer.h): pools of index_kpool tokens, the top
//    index_topk / index_kpool complete visible pools expanded to tokens plus the tail pool; each
//    MLA layer caches its latent and the packed indexer row [key | gate score];
//  - every MLP's SwiGLU clamped at swiglu_limit (dense, shared and routed experts); dense
//    layers first (mlp_layer_types, else the first 3).
// Ships as a vision-language checkpoint (model_type glm5_next, the text model under
// text_config as glm5_next_text, tensors model.language_model.*); the vision tower is not
// loaded. Tensors under the names save_pretrained writes: self_attn.{q,k,v}_conv1d, A_log [H],
// dt_bias, f_a_proj, f_b_proj on KDA layers; hc_{attn,ffn}_{fn,base,scale}; indexer.
// index_kpool_compress_{gate,ape}; experts one by one.
// KDA layers keep per-sequence state (kda.conv, kda.state, kda.block), so the engine gives each
// running sequence a state slot and refuses prefix-cache hits on this family.
#include <cmath>

#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"
#include "model/kda_attention.h"
#include "model/kpool_indexer.h"
#include "ops/hyper_connections.h"

namespace latent::model {
namespace {

// transformers' Glm5NextTextConfig defaults.
ArchDefaults Defaults() {
  ArchDefaults d;
  d.first_k_dense_replace = 3;  // mlp_layer_types' default: the first 3 layers dense
  d.n_group = 1;
  d.topk_group = 1;
  d.n_shared_experts = 1;
  d.routed_scaling_factor = 2.5;
  d.norm_topk_prob = true;
  d.topk_methods = {TopkMethod::kNoauxTc};
  d.scoring = ScoringFunc::kSigmoid;
  d.max_position_embeddings = 1048576;
  d.rope_dims_may_be_zero = true;
  return d;
}

// Per layer: true for a KDA layer (layer_types "linear_attention"; "indexed_attention" or
// "full_attention" for MLA), else transformers' default.
std::vector<bool> ParseLayerTypes(const ConfigReader& top, int64_t layers) {
  std::vector<bool> kda(layers);
  if (!top.Has("layer_types")) {
    for (int64_t l = 0; l < layers; ++l) kda[l] = l % 4 != 3;
    return kda;
  }
  const Json& v = top["layer_types"];
  if (!v.is_array() || static_cast<int64_t>(v.size()) != layers) {
    Fail(top.source(), ": 'layer_types' must list one type for each of the ", layers, " layers");
  }
  for (int64_t l = 0; l < layers; ++l) {
    if (v[l] != "linear_attention" && v[l] != "indexed_attention" && v[l] != "full_attention") {
      Fail(top.source(), ": 'layer_types' entry ", l,
           " must be \"linear_attention\", \"indexed_attention\" or \"full_attention\", got ", v[l].dump());
    }
    kda[l] = v[l] == "linear_attention";
  }
  return kda;
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  const int64_t layers = config.num_hidden_layers;
  config.rms_norm_eps = top.NumberOr("rms_norm_eps", 1e-5);
  if (!(config.rms_norm_eps > 0)) Fail(source, ": 'rms_norm_eps' must be positive");
  if (config.qk_rope_head_dim != 0) {
    Fail(source, ": glm5_next's attention is NoPE: qk_rope_head_dim must be 0, got ", config.qk_rope_head_dim);
  }
  if (!config.q_lora_rank) Fail(source, ": glm5_next needs q_lora_rank (its DSA indexer reads the query latent)");
  // KDA: the top-level fields, overridden by a linear_attn_config object as in transformers.
  config.linear_head_dim = top.IntOr("linear_head_dim", 128);
  config.linear_num_heads = top.IntOr("linear_num_heads", 64);
  config.linear_conv_kernel = top.IntOr("linear_conv_kernel_dim", 4);
  std::optional<double> lower_bound = -5.0;
  if (top.Present("linear_lower_bound")) {
    lower_bound = top.Has("linear_lower_bound") ? std::optional(top.NumberOr("linear_lower_bound", 0)) : std::nullopt;
  }
  if (top.Has("linear_attn_config")) {
    if (!top["linear_attn_config"].is_object()) Fail(source, ": 'linear_attn_config' must be an object");
    const ConfigReader l(top["linear_attn_config"], source + " linear_attn_config");
    config.linear_head_dim = l.IntOr("head_dim", config.linear_head_dim);
    config.linear_num_heads = l.IntOr("num_heads", config.linear_num_heads);
    config.linear_conv_kernel = l.IntOr("short_conv_kernel_size", config.linear_conv_kernel);
    if (l.Present("gate_lower_bound")) {
      lower_bound = l.Has("gate_lower_bound") ? std::optional(l.NumberOr("gate_lower_bound", 0)) : std::nullopt;
    }
    if (!lower_bound && l.BoolOr("safe_gate", true)) lower_bound = -5.0;
  }
  if (config.linear_head_dim <= 0 || config.linear_num_heads <= 0 || config.linear_conv_kernel < 2) {
    Fail(source, ": linear attention needs positive head_dim and num_heads and a kernel of at least 2 taps, got ",
         config.linear_head_dim, ", ", config.linear_num_heads, ", ", config.linear_conv_kernel);
  }
  if (lower_bound && !(*lower_bound < 0)) {
    Fail(source, ": 'linear_lower_bound' must be negative (the forget gate's log-decay floor), got ", *lower_bound);
  }
  config.linear_gate_lower_bound = lower_bound;
  config.linear_attention_layers = ParseLayerTypes(top, layers);
  // DSA on the MLA layers, KPool pools.
  ParseDsaIndexer(top, config, /*default_heads=*/32, /*query_latent=*/true);
  ParseIndexShare(top, config);
  config.index_kpool = top.IntOr("index_kpool", 16);
  if (config.index_kpool < 1) Fail(source, ": 'index_kpool' must be positive, got ", config.index_kpool);
  if (config.index_topk % config.index_kpool != 0) {
    Fail(source, ": index_topk (", config.index_topk, ") must be divisible by index_kpool (", config.index_kpool, ")");
  }
  if (!top.BoolOr("index_kpool_always_select_tail", true)) {
    Fail(source, ": index_kpool_always_select_tail false is not supported (the tail pool is always attended)");
  }
  for (int64_t l = 0; l < layers; ++l) {
    if (config.IsLinearAttentionLayer(l)) {
      config.indexer_layers[l] = false;  // a KDA layer has no indexer, whatever indexer_types says
    } else if (!config.indexer_layers[l] && (l == 0 || config.IsLinearAttentionLayer(l - 1))) {
      // transformers hands a shared layer the top-k of the layer right before it only.
      Fail(source, ": layer ", l, " is a shared indexer layer, but layer ", l - 1,
           " is not an MLA layer whose selection it could reuse");
    }
  }
  // mHC.
  config.hc_mult = top.IntOr("hc_mult", 4);
  if (config.hc_mult <= 0) Fail(source, ": 'hc_mult' must be positive, got ", config.hc_mult);
  config.hc_eps = top.NumberOr("hc_eps", 1e-6);
  config.hc_magnitude = 2.0;
  config.hc_sinkhorn_iters = top.IntOr("hc_sinkhorn_iters", 20);
  if (config.hc_sinkhorn_iters < 1) {
    Fail(source, ": 'hc_sinkhorn_iters' must be at least 1, got ", config.hc_sinkhorn_iters);
  }
  config.swiglu_limit = top.NumberOr("swiglu_limit", 10.0);
  if (!(config.swiglu_limit > 0)) Fail(source, ": 'swiglu_limit' must be positive, got ", config.swiglu_limit);
  config.swiglu_limit_all_mlps = true;
}

class Tensors {
 public:
  Tensors(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w, const TensorVisitor& visit)
      : c_(c), w_(w), visit_(visit), t_(c, layout, w, visit) {}

  void All() {
    t_.Embedding();
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      const std::string p = StrCat("model.layers.", l, ".");
      HyperConnection(p + "hc_attn_", Layer(l) ? &Layer(l)->attn_hc : nullptr);
      HyperConnection(p + "hc_ffn_", Layer(l) ? &Layer(l)->ffn_hc : nullptr);
      t_.InputNorm(l);
      if (c_.IsLinearAttentionLayer(l)) {
        Kda(l);
      } else {
        t_.MlaAttention(l);
        if (c_.HasIndexer(l)) {
          t_.DsaIndexer(l);
          KPool(l);
        }
      }
      t_.PostAttentionNorm(l);
      c_.IsMoeLayer(l) ? t_.Moe(l) : t_.DenseMlp(l);
    }
    t_.FinalNorm();
    t_.LmHead();
  }

 private:
  template <class T>
  static TensorTarget To(T* p) {
    return p != nullptr ? TensorTarget{p} : TensorTarget{};
  }
  LayerWeights* Layer(int64_t l) const { return w_ ? &w_->layers[l] : nullptr; }
  void Add(std::string name, Shape shape, WeightKind kind, QuantizeRule rule, TensorTarget target) {
    visit_(ExpectedWeight{std::move(name), std::move(shape), kind, rule, target, Presence::kRequired});
  }
  void Linear(const std::string& name, Shape shape, kernels::WeightRef* target) {
    Add(name, std::move(shape), WeightKind::kLinear, QuantizeRule::kWeightsAndActivations, To(target));
  }
  // Small f32 parameters (convolution taps, gate constants, hyper-connections), kept as stored.
  void F32(const std::string& name, Shape shape, std::vector<float>* target) {
    Add(name, std::move(shape), WeightKind::kRouter, QuantizeRule::kKeep, To(target));
  }

  // hc_<kind>_{fn, base, scale}: pre, post and comb of N streams.
  void HyperConnection(const std::string& p, std::optional<ops::HyperConnectionWeights>* target) {
    ops::HyperConnectionWeights* w = target ? &target->emplace() : nullptr;
    const int64_t n = c_.hc_mult, rows = (2 + n) * n;
    F32(p + "fn", {rows, n * c_.hidden_size}, w ? &w->fn : nullptr);
    F32(p + "base", {rows}, w ? &w->base : nullptr);
    F32(p + "scale", {3}, w ? &w->scale : nullptr);
  }

  void Kda(int64_t l) {
    ops::KdaWeights* k = Layer(l) ? &Layer(l)->kda.emplace() : nullptr;
    const std::string a = StrCat("model.layers.", l, ".self_attn.");
    const int64_t d = c_.hidden_size, h = c_.linear_num_heads, dk = c_.linear_head_dim, ch = h * dk;
    const int64_t taps = c_.linear_conv_kernel;
    Linear(a + "q_proj.weight", {ch, d}, k ? &k->q : nullptr);
    Linear(a + "k_proj.weight", {ch, d}, k ? &k->k : nullptr);
    Linear(a + "v_proj.weight", {ch, d}, k ? &k->v : nullptr);
    F32(a + "q_conv1d.weight", {ch, 1, taps}, k ? &k->q_conv : nullptr);
    F32(a + "k_conv1d.weight", {ch, 1, taps}, k ? &k->k_conv : nullptr);
    F32(a + "v_conv1d.weight", {ch, 1, taps}, k ? &k->v_conv : nullptr);
    F32(a + "A_log", {h}, k ? &k->forget.a_log : nullptr);
    F32(a + "dt_bias", {ch}, k ? &k->forget.dt_bias : nullptr);
    Linear(a + "f_a_proj.weight", {dk, d}, k ? &k->forget.f_a : nullptr);
    Linear(a + "f_b_proj.weight", {ch, dk}, k ? &k->forget.f_b : nullptr);
    Linear(a + "b_proj.weight", {h, d}, k ? &k->b : nullptr);
    Linear(a + "g_a_proj.weight", {dk, d}, k ? &k->g_a : nullptr);
    Linear(a + "g_b_proj.weight", {ch, dk}, k ? &k->g_b : nullptr);
    Add(a + "o_norm.weight", {dk}, WeightKind::kNorm, QuantizeRule::kKeep, To(k ? &k->o_norm : nullptr));
    Linear(a + "o_proj.weight", {d, ch}, k ? &k->o : nullptr);
  }

  // The KPool pieces of the indexer, kept as stored under --quantize like the rest of it.
  void KPool(int64_t l) {
    IndexerWeights* w = Layer(l) ? &*Layer(l)->indexer : nullptr;
    const std::string x = StrCat("model.layers.", l, ".self_attn.indexer.");
    const int64_t di = c_.index_head_dim;
    F32(x + "index_kpool_compress_ape", {c_.index_kpool, di}, w ? &w->kpool_ape : nullptr);
    Add(x + "index_kpool_compress_gate", {di, c_.hidden_size}, WeightKind::kLinear, QuantizeRule::kKeep,
        To(w ? &w->kpool_gate : nullptr));
  }

  const ModelConfig& c_;
  DeepseekWeights* w_;
  const TensorVisitor& visit_;
  DeepseekTensors t_;
};

void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w, const TensorVisitor& visit) {
  Tensors(c, layout, w, visit).All();
}

// KDA layers keep per-sequence state; MLA layers cache their NoPE latent and, with an indexer,
// the packed KPool row.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  cache::ModelCacheRows rows(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.IsLinearAttentionLayer(l)) {
      rows[l] = KdaStateRows(c);
      continue;
    }
    rows[l].push_back(MlaLatentRow(c, dtype, 0));
    if (c.HasIndexer(l)) rows[l].push_back(KPoolIndexRow(c, dtype));
  }
  return rows;
}

ops::HyperConnectionDims HyperDims(const ModelConfig& c) {
  ops::HyperConnectionDims d;
  d.streams = c.hc_mult;
  d.hidden = c.hidden_size;
  d.norm_eps = static_cast<float>(c.rms_norm_eps);
  d.gate_eps = static_cast<float>(c.hc_eps);
  d.post_magnitude = 2.0f;
  d.post_gate_eps = false;
  d.mix_streams = true;
  d.sinkhorn_iters = c.hc_sinkhorn_iters;
  return d;
}

class Glm5Next final : public DeepseekModel {
 public:
  Glm5Next(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options),
        hc_(HyperDims(this->config())),
        kda_dims_{this->config().linear_num_heads, this->config().linear_head_dim,
                  this->config().linear_conv_kernel, static_cast<float>(this->config().linear_gate_lower_bound.value_or(0.0))},
        gate_(this->config().linear_gate_lower_bound ? KdaForgetGateKind::kGlm5Next
                                                         : KdaForgetGateKind::kKimi) {}

  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override {
    LATENT_PROFILE_SCOPE(kStep);
    const ModelConfig& c = config();
    Activations a = Start(batch);
    const int64_t tokens = a.tokens;
    Embed(batch, a.hidden.data());
    std::vector<float> streams(tokens * hc_.flat());  // [T, N, D] the residual streams
    ops::BroadcastStreams(hc_, a.hidden.data(), tokens, streams.data());
    DsaSelection selection;  // the last MLA layer's, for a shared indexer layer right after it
    if (trace != nullptr) trace->selected.assign(c.num_hidden_layers, {});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const LayerWeights& w = layer(l);
      const ops::HyperGates attn_gates = Collapse(*w.attn_hc, streams, tokens, a.hidden.data());
      RmsNorm(a.hidden.data(), tokens, w.input_norm, a.normed.data());
      if (c.IsLinearAttentionLayer(l)) {
        KdaAttentionForward(kda_dims_, *w.kda, gate_, static_cast<float>(c.rms_norm_eps), l, batch,
                            a.normed.data(), c.hidden_size, a.branch.data());
      } else {
        MlaAttention(l, batch, a.normed.data(), form, &selection, a.branch.data());
        if (trace != nullptr) trace->selected[l] = selection;
      }
      Expand(attn_gates, a.branch.data(), tokens, streams);
      const ops::HyperGates ffn_gates = Collapse(*w.ffn_hc, streams, tokens, a.hidden.data());
      RmsNorm(a.hidden.data(), tokens, w.post_attention_norm, a.normed.data());
      FeedForward(l, a.normed.data(), tokens, a.branch.data(), trace);
      Expand(ffn_gates, a.branch.data(), tokens, streams);
      dump::Tensor("hidden", l, streams.data(), tokens, hc_.flat());
    }
    {
      LATENT_PROFILE_SCOPE(kResidual);
      ops::MeanCollapseStreams(hc_, streams.data(), tokens, a.hidden.data());
    }
    Head(batch, a.hidden.data(), logits);
  }

 private:
  // x [T, D] = the block input the hyper-connection `w` collapses from the streams; its gates.
  ops::HyperGates Collapse(const ops::HyperConnectionWeights& w, const std::vector<float>& streams,
                           int64_t tokens, float* x) const {
    LATENT_PROFILE_SCOPE(kResidual);
    ops::HyperGates gates = ops::ComputeHyperGates(hc_, w, streams.data(), tokens);
    ops::CollapseStreams(hc_, gates.pre.data(), streams.data(), tokens, x);
    return gates;
  }

  // streams <- post * branch [T, D] + comb^T streams.
  void Expand(const ops::HyperGates& gates, const float* branch, int64_t tokens,
              std::vector<float>& streams) const {
    LATENT_PROFILE_SCOPE(kResidual);
    ops::ExpandStreams(hc_, gates, branch, tokens, streams.data());
  }

  ops::HyperConnectionDims hc_;
  ops::KdaDims kda_dims_;
  KdaForgetGateKind gate_;
};

Arch Make() {
  Arch arch;
  arch.name = "glm5_next";
  arch.model_types = {"glm5_next_text"};
  arch.wrapper_model_types = {"glm5_next"};
  arch.defaults = Defaults();
  arch.parse = Parse;
  arch.tensors = [](const ModelConfig& c, ExpertLayout layout, const TensorVisitor& visit) {
    ForEachTensor(c, layout, nullptr, visit);
  };
  arch.cache_rows = CacheRows;
  arch.create = [](ModelConfig config, weights::Checkpoint ckpt,
                   const LoadOptions& options) -> std::unique_ptr<Model> {
    return std::make_unique<Glm5Next>(std::move(config), std::move(ckpt), options);
  };
  return arch;
}

}  // namespace

LATENT_ARCH(185, Make);

}  // namespace latent::model
