// Mistral Large 4 (mistral_large4_text, released inside a mistral_large4 vision-language
// checkpoint): GLM-5's DSA (full/shared indexer layers) on an MLA without query LoRA, plus
//  - NoPE layers (no_rope_layers[l] == 0): no rotary part; the latent row is kv_lora_rank values
//    and every head dim is a nope dim;
//  - KV sharing (kv_source_layers[l] != l): the layer has no kv_a_proj / kv_a_norm, caches no
//    latent and attends to the rows of its source layer (with its own kv_b); it caches only its
//    indexer key when it runs an indexer;
//  - LeRoPE: inv_freq * exp(lerope.alpha) under YaRN (no magnitude scaling), interleaved;
//  - learned log-position query scaling q *= s_h * ln(position + 1) + b_h after rope (the
//    indexer's queries get their own, before rope; its queries come from LayerNorm(x));
//  - a softmax router with the top-2-sum group mask (mistral4's), always renormalised;
//  - logits soft-capped, cap * tanh(logits / cap).
// Tensors keep Mistral's native names at the checkpoint's root (what save_pretrained writes for
// this class): tok_embeddings, layers.N.attention.{wq, wkv_a_with_mqa, kv_a_norm, wkv_b, wo,
// ssmax_scaling.{s,b}, indexer.*}, attention_norm, ffn_norm, feed_forward.w1/w2/w3, gate,
// experts.E.w1/w2/w3, shared_experts.*, norm, output, lerope.alpha; the vision encoder and
// projector beside them are not loaded.
#include <cmath>

#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

// transformers' MistralLarge4TextConfig defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 1, .n_group = 1, .topk_group = 1, .n_shared_experts = 1,
          .routed_scaling_factor = 1.0, .norm_topk_prob = true,
          .topk_methods = {TopkMethod::kGroupTop2}, .scoring = ScoringFunc::kSoftmax,
          .max_position_embeddings = 1048576, .rms_norm_eps = 1e-5, .bos = 1, .eos = 2};
}

// The config class has no query LoRA (and no q_lora_rank field), and fills rope_parameters with
// its YaRN + LeRoPE defaults when absent.
void Prepare(Json& json, const std::string& source) {
  if (json.contains("q_lora_rank") && !json["q_lora_rank"].is_null()) {
    Fail(source, ": mistral_large4 has no query LoRA, but q_lora_rank is ", json["q_lora_rank"].dump());
  }
  json["q_lora_rank"] = nullptr;
  if (!json.contains("rope_parameters") && !json.contains("rope_scaling")) {
    json["rope_parameters"] = {{"rope_type", "yarn"},        {"rope_theta", 10000.0},
                               {"factor", 2048.0},          {"original_max_position_embeddings", 512},
                               {"beta_fast", 32.0},         {"beta_slow", 1.0},
                               {"attention_factor", 1.0}};
  }
}

// no_rope_layers: per layer 1 (rotary) or 0 (NoPE), at least one entry per layer; without it
// every fourth layer is NoPE.
std::vector<bool> ParseRopeLayers(const ConfigReader& top, int64_t layers) {
  std::vector<bool> rope;
  if (!top.Has("no_rope_layers")) {
    const int64_t interval = top.IntOr("no_rope_layer_interval", 4);
    if (interval <= 0) Fail(top.source(), ": 'no_rope_layer_interval' must be positive");
    for (int64_t l = 0; l < layers; ++l) rope.push_back((l + 1) % interval != 0);
    return rope;
  }
  const Json& v = top["no_rope_layers"];
  if (!v.is_array() || static_cast<int64_t>(v.size()) < layers) {
    Fail(top.source(), ": 'no_rope_layers' must list 0 or 1 for each of the ", layers, " layers");
  }
  for (int64_t l = 0; l < layers; ++l) {
    if (!v[l].is_number_integer() || (v[l].get<int64_t>() != 0 && v[l].get<int64_t>() != 1)) {
      Fail(top.source(), ": 'no_rope_layers' entry ", l, " must be 0 (NoPE) or 1 (rope), got ", v[l].dump());
    }
    rope.push_back(v[l].get<int64_t>() == 1);
  }
  return rope;
}

// kv_source_layers, checked as transformers checks them, plus what its forward implies: a sharing
// layer reads the latest layer of its own rope kind that stores its latent for later layers, so
// that must be the source the config names.
std::vector<int64_t> ParseKvSources(const ConfigReader& top, const std::vector<bool>& rope) {
  const int64_t layers = static_cast<int64_t>(rope.size());
  std::vector<int64_t> source;
  if (!top.Has("kv_source_layers")) return source;  // every layer owns its latent
  const Json& v = top["kv_source_layers"];
  if (!v.is_array() || static_cast<int64_t>(v.size()) != layers) {
    Fail(top.source(), ": 'kv_source_layers' must have one entry per layer (", layers, ")");
  }
  for (int64_t l = 0; l < layers; ++l) {
    if (!v[l].is_number_integer()) Fail(top.source(), ": 'kv_source_layers' entry ", l, " must be an integer");
    source.push_back(v[l].get<int64_t>());
  }
  std::vector<bool> stores(layers, false);  // owners some later layer reads
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t s = source[l];
    if (s < 0 || s > l || source[s] != s) {
      Fail(top.source(), ": layer ", l, " must share KV with an earlier layer that owns its cache, got ", s);
    }
    if (s != l) stores[s] = true;
  }
  for (int64_t l = 0; l < layers; ++l) {
    if (source[l] == l) continue;
    int64_t latest = -1;
    for (int64_t p = 0; p < l; ++p) {
      if (stores[p] && rope[p] == rope[l]) latest = p;
    }
    if (latest != source[l]) {
      Fail(top.source(), ": layer ", l, " (", rope[l] ? "rope" : "NoPE", ") names layer ", source[l],
           " as its KV source, but attends to the latest ", rope[l] ? "rope" : "NoPE",
           " layer storing one before it (", latest < 0 ? std::string("none") : std::to_string(latest), ")");
    }
  }
  bool shares = false;
  for (int64_t l = 0; l < layers; ++l) shares = shares || source[l] != l;
  if (!shares) source.clear();
  return source;
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  config.rope_interleave = true;
  ParseIndexedLayerTypes(top, config);
  ParseDsaIndexer(top, config, /*default_heads=*/32, /*query_latent=*/false);
  ParseIndexShare(top, config);
  config.rope_layers = ParseRopeLayers(top, config.num_hidden_layers);
  config.kv_source_layers = ParseKvSources(top, config.rope_layers);
  config.final_logit_softcapping = top.NumberOr("final_logit_softcapping", 30.0);
  if (!(config.final_logit_softcapping > 0)) Fail(source, ": 'final_logit_softcapping' must be positive");
  config.norm_topk_prob = true;  // The router always renormalises its top-k weights.
  if (config.n_routed_experts > 0 && config.n_routed_experts / config.n_group < 2) {
    Fail(source, ": mistral_large4 needs at least 2 experts per group, got ",
         config.n_routed_experts / config.n_group);
  }
}

// Every tensor under Mistral's native names; with `w`, where each one loads.
class Tensors {
 public:
  Tensors(const ModelConfig& c, DeepseekWeights* w, const TensorVisitor& visit)
      : c_(c), w_(w), visit_(visit) {
    if (w_ != nullptr) w_->layers.resize(c_.num_hidden_layers);
  }

  void All() {
    Add("tok_embeddings.weight", {c_.vocab_size, c_.hidden_size}, WeightKind::kEmbedding,
        QuantizeRule::kKeep, To(w_ ? &w_->embed : nullptr));
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) Layer(l);
    Add("norm.weight", {c_.hidden_size}, WeightKind::kNorm, QuantizeRule::kKeep,
        To(w_ ? &w_->final_norm : nullptr));
    // Tied: the embedding unless the checkpoint stores a head of its own (Presence::kTiedHead).
    Add("output.weight", {c_.vocab_size, c_.hidden_size}, WeightKind::kEmbedding,
        QuantizeRule::kWeightsAndActivations, To(w_ ? &w_->lm_head : nullptr),
        c_.tie_word_embeddings ? Presence::kTiedHead : Presence::kRequired);
    // Kept in f32 (transformers' _keep_in_fp32_modules_strict), like a router.
    Add("lerope.alpha", {c_.qk_rope_head_dim / 2}, WeightKind::kRouter, QuantizeRule::kKeep,
        To(w_ ? &w_->rope_alpha : nullptr));
  }

 private:
  template <class T>
  static TensorTarget To(T* p) {
    return p != nullptr ? TensorTarget{p} : TensorTarget{};
  }

  void Add(std::string name, Shape shape, WeightKind kind, QuantizeRule rule, TensorTarget target,
           Presence presence = Presence::kRequired) {
    visit_(ExpectedWeight{std::move(name), std::move(shape), kind, rule, target, presence,
                          expert_});
  }

  void Linear(const std::string& name, Shape shape, QuantizeRule rule, kernels::WeightRef* target) {
    Add(name, std::move(shape), WeightKind::kLinear, rule, To(target));
  }

  void Norm(const std::string& name, int64_t d, NormWeight* target) {
    Add(name, {d}, WeightKind::kNorm, QuantizeRule::kKeep, To(target));
  }

  // ssmax_scaling.{s,b}: the log-position query scaling of `heads` heads.
  void QueryScale(const std::string& prefix, int64_t heads, ops::LogPositionScale* target) {
    Add(prefix + "ssmax_scaling.s", {heads}, WeightKind::kNorm, QuantizeRule::kKeep,
        To(target ? &target->scale : nullptr));
    Add(prefix + "ssmax_scaling.b", {heads}, WeightKind::kNorm, QuantizeRule::kKeep,
        To(target ? &target->bias : nullptr));
  }

  // w1 (gate), w2 (down), w3 (up).
  void Mlp(const std::string& p, int64_t inter, ops::MlpWeights* w) {
    const int64_t d = c_.hidden_size;
    constexpr auto kQuantized = QuantizeRule::kWeightsAndActivations;
    Linear(p + "w1.weight", {inter, d}, kQuantized, w ? &w->gate : nullptr);
    Linear(p + "w2.weight", {d, inter}, kQuantized, w ? &w->down : nullptr);
    Linear(p + "w3.weight", {inter, d}, kQuantized, w ? &w->up : nullptr);
  }

  void Layer(int64_t l) {
    LayerWeights* L = w_ ? &w_->layers[l] : nullptr;
    const std::string p = StrCat("layers.", l, ".");
    const std::string a = p + "attention.";
    const int64_t h = c_.num_attention_heads;
    const int64_t d = c_.hidden_size;
    const int64_t rope = c_.RopeDims(l);
    const int64_t nope = c_.qk_head_dim() - rope;
    AttentionWeights* at = L ? &L->attention : nullptr;
    constexpr auto kQuantized = QuantizeRule::kWeightsAndActivations;
    Norm(p + "attention_norm.weight", d, L ? &L->input_norm : nullptr);
    Linear(a + "wq.weight", {h * c_.qk_head_dim(), d}, kQuantized, at ? &at->q_proj.emplace() : nullptr);
    if (c_.OwnsLatent(l)) {
      Linear(a + "wkv_a_with_mqa.weight", {c_.kv_lora_rank + rope, d}, kQuantized, at ? &at->kv_a : nullptr);
      Norm(a + "kv_a_norm.weight", c_.kv_lora_rank, at ? &at->kv_a_norm : nullptr);
    }
    // kv_b's inputs stay f32 under w8a8, as for every family.
    Linear(a + "wkv_b.weight", {h * (nope + c_.v_head_dim), c_.kv_lora_rank}, QuantizeRule::kWeights,
           at ? &at->kv_b : nullptr);
    Linear(a + "wo.weight", {d, h * c_.v_head_dim}, kQuantized, at ? &at->o : nullptr);
    QueryScale(a, h, at ? &at->query_scale : nullptr);
    if (c_.HasIndexer(l)) Indexer(a + "indexer.", L ? &L->indexer.emplace() : nullptr);
    Norm(p + "ffn_norm.weight", d, L ? &L->post_attention_norm : nullptr);
    if (!c_.IsMoeLayer(l)) {
      Mlp(p + "feed_forward.", c_.intermediate_size, L ? &L->dense.emplace() : nullptr);
      return;
    }
    MoeWeights* m = L ? &L->moe.emplace() : nullptr;
    if (m != nullptr) m->experts.resize(c_.n_routed_experts);
    Add(p + "gate.weight", {c_.n_routed_experts, d}, WeightKind::kRouter, QuantizeRule::kKeep,
        To(m ? &m->router : nullptr));
    for (int64_t e = 0; e < c_.n_routed_experts; ++e) {
      expert_ = e;
      Mlp(StrCat(p, "experts.", e, "."), c_.moe_intermediate_size, m ? &m->experts[e] : nullptr);
      expert_ = -1;
    }
    if (c_.n_shared_experts > 0) {
      Mlp(p + "shared_experts.", c_.moe_intermediate_size * c_.n_shared_experts,
          m ? &m->shared.emplace() : nullptr);
    }
  }

  // The indexer stays as stored under --quantize (its scores pick positions).
  void Indexer(const std::string& x, IndexerWeights* w) {
    const int64_t di = c_.index_head_dim;
    const int64_t d = c_.hidden_size;
    Linear(x + "wq_b.weight", {c_.index_n_heads * di, d}, QuantizeRule::kKeep, w ? &w->wq_b : nullptr);
    Linear(x + "wk.weight", {di, d}, QuantizeRule::kKeep, w ? &w->wk : nullptr);
    Norm(x + "k_norm.weight", di, w ? &w->k_norm : nullptr);
    Norm(x + "k_norm.bias", di, w ? &w->k_norm_bias : nullptr);
    Add(x + "weights_proj.weight", {c_.index_n_heads, d}, WeightKind::kRouter, QuantizeRule::kKeep,
        To(w ? &w->weights_proj : nullptr));
    Norm(x + "q_input_norm.weight", d, w ? &w->q_norm : nullptr);
    Norm(x + "q_input_norm.bias", d, w ? &w->q_norm_bias : nullptr);
    QueryScale(x, c_.index_n_heads, w ? &w->query_scale : nullptr);
  }

  const ModelConfig& c_;
  DeepseekWeights* w_;
  const TensorVisitor& visit_;
  int64_t expert_ = -1;  // The routed expert being listed (ExpectedWeight::expert), else -1.
};

void ForEachTensor(const ModelConfig& c, ExpertLayout, DeepseekWeights* w, const TensorVisitor& visit) {
  Tensors(c, w, visit).All();
}

// Rows per layer kind: a layer owning its latent caches it (kv_lora_rank values on NoPE layers,
// + qk_rope_head_dim on rope layers); a layer running its own indexer caches its key. A layer that
// shares another's latent and reuses an earlier layer's selection caches nothing.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  cache::ModelCacheRows rows(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.OwnsLatent(l)) rows[l].push_back(MlaLatentRow(c, dtype, c.RopeDims(l)));
    if (c.HasIndexer(l)) rows[l].push_back(DsaIndexKeyRow(c, dtype));
  }
  return rows;
}

// Its Forward is DeepseekModel\'s plain pre-norm decoder.
class MistralLarge4 final : public DeepseekModel {
 public:
  MistralLarge4(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options,
                      /*index_rope_interleaved=*/true) {}
};

Arch Make() {
  return WithModel<MistralLarge4, ForEachTensor>(
      {.name = "mistral_large4", .model_types = {"mistral_large4_text"}, .defaults = Defaults(),
       .wrapper_model_types = {"mistral_large4"}, .prepare = Prepare, .parse = Parse,
       .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(130, Make);

}  // namespace latent::model
