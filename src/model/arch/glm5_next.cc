// GLM-5-Next (glm5_next; GLM-5.3-Flash): a hybrid of KDA linear-attention layers
// (model/kda_attention.h) and DSA MLA layers, KDA on l % 4 != 3 by default, with
//  - no rotary part anywhere (qk_rope_head_dim 0): the MLA latent row is kv_lora_rank values;
//  - KDA's bounded forget gate lower_bound * sigmoid(exp(A_log) * (f + dt_bias))
//    (linear_lower_bound, -5; null: Kimi's softplus form);
//  - mHC residual streams (hc_mult, 4): around each block a hyper-connection collapses the
//    streams into the block's input (pre gates) and writes post * output + comb^T streams back,
//    comb Sinkhorn-normalised (ops/hyper_connections.h); the head takes the streams' mean;
//  - the KPool DSA indexer (ops/kpool_indexer.h): pools of index_kpool tokens, the top
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
#include "model/arch/registry.h"
#include "model/cache_rows.h"
#include "model/hyper_connection_model.h"

namespace latent::model {
namespace {

// transformers' Glm5NextTextConfig defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 3,  // mlp_layer_types' default: the first 3 layers dense
          .null_first_dense = NullFirstDense::kIgnored,  // the class never reads it
          .n_group = 1, .topk_group = 1, .n_shared_experts = 1, .routed_scaling_factor = 2.5,
          .norm_topk_prob = true, .topk_methods = {TopkMethod::kNoauxTc},
          .scoring = ScoringFunc::kSigmoid, .max_position_embeddings = 1048576,
          .rms_norm_eps = 1e-5,
          .rope_dims_may_be_zero = true};
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
  CheckLinearAttentionDims(source, config);
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
  ParseHyperStreams(top, config);
  config.hc_magnitude = 2.0;
  config.hc_sinkhorn_iters = top.IntOr("hc_sinkhorn_iters", 20);
  // Every block of every token runs the iterations: bounded so that a typo cannot stall each
  // step (GLM-5-Next runs 20; the normalisation has converged long before the bound).
  constexpr int64_t kMaxSinkhornIters = 10000;
  if (config.hc_sinkhorn_iters < 1 || config.hc_sinkhorn_iters > kMaxSinkhornIters) {
    Fail(source, ": 'hc_sinkhorn_iters' must be from 1 to ", kMaxSinkhornIters, ", got ",
         config.hc_sinkhorn_iters);
  }
  config.swiglu_limit = top.NumberOr("swiglu_limit", 10.0);
  if (!(config.swiglu_limit > 0)) Fail(source, ": 'swiglu_limit' must be positive, got ", config.swiglu_limit);
  config.swiglu_limit_all_mlps = true;
}

// The KPool pieces of layer l's indexer, kept as stored under --quantize like the rest of it.
void KPoolTensors(const ModelConfig& c, int64_t l, DeepseekTensors& t) {
  IndexerWeights* w = t.Layer(l) ? &*t.Layer(l)->indexer : nullptr;
  const std::string x = StrCat("model.layers.", l, ".self_attn.indexer.");
  const int64_t di = c.index_head_dim;
  t.F32(x + "index_kpool_compress_ape", {c.index_kpool, di}, w ? &w->kpool_ape : nullptr);
  t.Linear(x + "index_kpool_compress_gate", {di, c.hidden_size}, w ? &w->kpool_gate : nullptr,
           QuantizeRule::kKeep);
}

// The DeepSeek pieces plus the hyper-connections, KDA's low-rank gates and the KPool indexer.
void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w, const TensorVisitor& visit) {
  DeepseekTensors t(c, layout, w, visit);
  t.Embedding();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = StrCat("model.layers.", l, ".");
    LayerWeights* L = t.Layer(l);
    t.HyperConnection(p + "hc_attn_", L ? &L->attn_hc : nullptr);
    t.HyperConnection(p + "hc_ffn_", L ? &L->ffn_hc : nullptr);
    t.InputNorm(l);
    if (c.IsLinearAttentionLayer(l)) {
      t.KdaAttentionAt(l, p + "self_attn.", {c.linear_num_heads});
    } else {
      t.MlaAttention(l);
      if (c.HasIndexer(l)) {
        t.DsaIndexer(l);
        KPoolTensors(c, l, t);
      }
    }
    t.PostAttentionNorm(l);
    c.IsMoeLayer(l) ? t.Moe(l) : t.DenseMlp(l);
  }
  t.FinalNorm();
  t.LmHead();
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

class Glm5Next final : public HyperConnectionModel {
 public:
  Glm5Next(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : HyperConnectionModel(std::move(config), std::move(ckpt), ForEachTensor, options) {
    EnableKda(this->config().linear_gate_lower_bound ? KdaForgetGateKind::kGlm5Next
                                                     : KdaForgetGateKind::kKimi);
  }
};

Arch Make() {
  return WithModel<Glm5Next, ForEachTensor>(
      {.name = "glm5_next", .model_types = {"glm5_next_text"}, .defaults = Defaults(),
       .wrapper_model_types = {"glm5_next"}, .parse = Parse, .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(185, Make);

}  // namespace latent::model
