// dots3-note (dots3_note_text, the text model of a dots3_note vision-language checkpoint): DeepSeek
// V3.2's skeleton (MLA with interleaved rope, sigmoid noaux_tc router) with two kinds of layer:
//  - DSA layers (l < 2 or l % 4 == 1, "indexed_attention"): GLM-5's indexer, the top-level MLA
//    dims, rope theta 8e7;
//  - sliding-window layers ("sliding_attention"): attend to the last `sliding_window` positions
//    only, with their own MLA shape (per_layer_config, or the released checkpoint's swa_* keys:
//    heads, q_lora_rank, kv_lora_rank, head dims) and rope theta (5e4); their latent row is a
//    Retention::kWindow row, so the engine may drop the blocks that fall out of every window;
//  - on every layer: q_a_layernorm(q_a) x sqrt(D / q_lora_rank) (the indexer reads it scaled),
//    the normalised latent x sqrt(D / kv_lora_rank) before caching, an RMSNorm of the rotary key
//    before rope (k_rope_only_layernorm), norms at rms_norm_eps, scale qk_head_dim^-0.5, and a
//    per-head output gate sigmoid(g_proj(x)) on each head's attention output;
//  - shared experts of shared_experts_intermediate_size.
// "full_attention" layers attend densely with the top-level dims. As in transformers, use_dsa
// renames one kind to the other: true (the default of a config without per_layer_config, such as
// the released checkpoint's, whose DSA layers are named "full_attention") makes every
// "full_attention" layer "indexed_attention", false the reverse.
#include <algorithm>
#include <cmath>
#include <optional>

#include "base/dump.h"
#include "base/profile.h"
#include "base/saturating.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

// transformers' Dots3NoteTextConfig defaults (DeepseekV32Config's where it has none).
ArchDefaults Defaults() {
  // Null: refused by DeriveMlpLayerTypes without mlp_layer_types; the key is then dropped.
  return {.first_k_dense_replace = 1,
          .null_first_dense = NullFirstDense::kFailsWithoutLayerTypes,
          .n_group = 1, .topk_group = 1, .n_shared_experts = 1,
          .routed_scaling_factor = 1.0, .norm_topk_prob = true,
          .topk_methods = {TopkMethod::kNoauxTc}, .scoring = ScoringFunc::kSigmoid,
          .max_position_embeddings = 524288, .rms_norm_eps = 1e-5, .bos = 151643, .eos = 151668};
}

constexpr const char* kSlidingRopeKey = "latent_sliding_rope_parameters";

// What Dots3NoteTextConfig derives before the common keys are read:
//  - mlp_layer_types from first_k_dense_replace (1) and moe_layer_freq (a number or a per-layer
//    list), when not given (DeriveMlpLayerTypes);
//  - layer_types from use_sliding_window / use_dsa (DSA at l < 2 or l % 4 == 1), when not given;
//    then use_dsa's renaming of full_attention / indexed_attention (UseDsa);
//  - rope_parameters per layer type ({"indexed_attention": {...}, "sliding_attention": {...}}),
//    or rope_theta (8e7) and swa_rope_theta (5e4): the DSA layers' settings become the model's
//    rope_parameters, the sliding layers' go to kSlidingRopeKey for Parse.
// Dots3NoteTextConfig's use_dsa: the stated value (null: none); unstated, true when the config
// has no per_layer_config (the released form, whose DSA layers are named "full_attention"), else
// none (transformers' own form, which names them "indexed_attention").
std::optional<bool> UseDsa(const ConfigReader& top) {
  if (top.Present("use_dsa")) {
    if (!top.Has("use_dsa")) return std::nullopt;
    return top.BoolOr("use_dsa", true);
  }
  if (top.Present("per_layer_config")) return std::nullopt;
  return true;
}

void Prepare(Json& json, const std::string& source) {
  if (!json.is_object()) return;  // the common parser names the problem
  const ConfigReader top(json, source);
  const int64_t layers = top.PositiveInt("num_hidden_layers");
  if (layers > kMaxConfigLayers) return;  // the common parser names the problem
  DeriveMlpLayerTypes(json, source, Defaults().first_k_dense_replace,
                      MoeLayerFreq::kNumberOrList);
  json.erase("first_k_dense_replace");
  const std::optional<bool> use_dsa = UseDsa(top);
  if (!top.Has("layer_types")) {
    const bool sliding = top.BoolOr("use_sliding_window", true);
    const char* full_kind = use_dsa == false ? "full_attention" : "indexed_attention";
    Json types = Json::array();
    for (int64_t l = 0; l < layers; ++l) {
      const bool full = !sliding || l < 2 || l % 4 == 1;
      types.push_back(full ? full_kind : "sliding_attention");
    }
    json["layer_types"] = std::move(types);
  }
  if (use_dsa.has_value() && json["layer_types"].is_array()) {
    // Dots3NoteTextConfig renames after deriving or reading the list: given layer_types too.
    const char* from = *use_dsa ? "full_attention" : "indexed_attention";
    const char* to = *use_dsa ? "indexed_attention" : "full_attention";
    for (Json& kind : json["layer_types"]) {
      if (kind == from) kind = to;
    }
  }
  const Json* params = top.Has("rope_parameters") ? &json["rope_parameters"]
                       : top.Has("rope_scaling")  ? &json["rope_scaling"]
                                                  : nullptr;
  Json full_rope = {{"rope_type", "default"}, {"rope_theta", top.NumberOr("rope_theta", 80000000.0)}};
  Json sliding_rope = {{"rope_type", "default"}, {"rope_theta", top.NumberOr("swa_rope_theta", 50000.0)}};
  if (params != nullptr && params->is_object()) {
    const bool nested = params->contains("indexed_attention") || params->contains("full_attention") ||
                        params->contains("sliding_attention");
    if (nested) {
      for (const char* kind : {"indexed_attention", "full_attention"}) {
        if (params->contains(kind)) full_rope = (*params)[kind];
      }
      if (params->contains("sliding_attention")) sliding_rope = (*params)["sliding_attention"];
    } else {
      full_rope = *params;  // one setting for every layer type
      sliding_rope = *params;
    }
  }
  for (Json* rope : {&full_rope, &sliding_rope}) {
    if (!rope->is_object()) Fail(source, ": rope_parameters per layer type must be objects");
    // The rotary dims are each layer kind's qk_rope_head_dim; the fraction says the same.
    rope->erase("partial_rotary_factor");
  }
  json.erase("rope_scaling");
  json.erase("rope_theta");
  json["rope_parameters"] = std::move(full_rope);
  json[kSlidingRopeKey] = std::move(sliding_rope);
}

// The sliding layers' rope: only the default rope (what dots3_note ships) is supported.
RopeConfig ParseSlidingRope(const ConfigReader& top) {
  const ConfigReader rope(top[kSlidingRopeKey], top.source() + " rope_parameters.sliding_attention");
  const std::string type = rope.StringOr("rope_type", rope.StringOr("type", "default"));
  if (type != "default") {
    Fail(rope.source(), ": rope_type '", type, "' is not supported on sliding-window layers (only default)");
  }
  RopeConfig config;
  config.theta = rope.PositiveNumberOr("rope_theta", 50000.0);
  return config;
}

// One layer kind's MLA shape from `values` (a per_layer_config entry, or the swa_* keys with
// `prefix` "swa_"), over `base`.
MlaLayerShape ReadShape(const ConfigReader& r, const std::string& prefix, MlaLayerShape base,
                        bool swa_defaults) {
  auto get = [&](const char* key, int64_t fallback) {
    const std::string k = prefix + key;
    return r.IntOr(k.c_str(), fallback);
  };
  MlaLayerShape s = base;
  s.num_attention_heads = get("num_attention_heads", swa_defaults ? 64 : base.num_attention_heads);
  const int64_t kv_heads = get("num_key_value_heads", s.num_attention_heads);
  if (kv_heads != s.num_attention_heads) {
    Fail(r.source(), ": ", prefix, "num_key_value_heads (", kv_heads, ") must equal ", prefix,
         "num_attention_heads (", s.num_attention_heads, ")");
  }
  s.q_lora_rank = get("q_lora_rank", swa_defaults ? 1024 : base.q_lora_rank);
  s.kv_lora_rank = get("kv_lora_rank", swa_defaults ? 1024 : base.kv_lora_rank);
  s.qk_nope_head_dim = get("qk_nope_head_dim", swa_defaults ? 192 : base.qk_nope_head_dim);
  s.v_head_dim = get("v_head_dim", swa_defaults ? 128 : base.v_head_dim);
  const int64_t head_dim = get("head_dim", swa_defaults ? 256 : s.qk_nope_head_dim + base.qk_rope_head_dim);
  s.qk_rope_head_dim = get("qk_rope_head_dim", head_dim - s.qk_nope_head_dim);
  return s;
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  const int64_t layers = config.num_hidden_layers;
  config.rope_interleave = true;
  if (!config.q_lora_rank) Fail(source, ": dots3_note needs q_lora_rank (the MLA queries use a LoRA)");
  if (config.n_shared_experts < 1) Fail(source, ": dots3_note needs at least one shared expert");
  config.shared_expert_intermediate_size = top.SizeOr(
      "shared_experts_intermediate_size", top.SizeOr("moe_shared_expert_intermediate_size", 1536));
  // Layer kinds.
  const Json& types = top["layer_types"];
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers) {
    Fail(source, ": 'layer_types' must list one entry per layer (", layers, ")");
  }
  std::vector<bool> indexed(layers, false);
  config.sliding_layers.assign(layers, false);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string kind = types[l].is_string() ? types[l].get<std::string>() : "";
    if (kind == "sliding_attention") {
      config.sliding_layers[l] = true;
    } else if (kind == "indexed_attention") {
      indexed[l] = true;
    } else if (kind != "full_attention") {
      Fail(source, ": 'layer_types' entry ", l, " is ", types[l].dump(),
           " (expected indexed_attention, sliding_attention or full_attention)");
    }
  }
  if (std::find(indexed.begin(), indexed.end(), true) != indexed.end()) {
    ParseDsaIndexer(top, config, /*default_heads=*/64);
    config.indexer_layers = indexed;
    for (int64_t l = 0; l < layers; ++l) {
      if (!indexed[l]) config.dsa_causal_layers = true;
    }
  }
  config.sliding_window = top.IntOr("sliding_window", top.IntOr("sliding_window_size", 512));
  if (config.sliding_window <= 0) Fail(source, ": 'sliding_window' must be positive");
  config.sliding_rope = ParseSlidingRope(top);
  // Per-layer MLA shapes: per_layer_config entries, else the swa_* keys on sliding layers.
  const MlaLayerShape base{config.num_attention_heads, *config.q_lora_rank, config.kv_lora_rank,
                           config.qk_nope_head_dim,    config.qk_rope_head_dim, config.v_head_dim};
  const MlaLayerShape swa = ReadShape(top, "swa_", base, /*swa_defaults=*/true);
  const bool per_layer = top.Has("per_layer_config");
  if (per_layer && !top["per_layer_config"].is_object()) {
    Fail(source, ": 'per_layer_config' must be an object keyed by layer index");
  }
  config.mla_layer_shapes.clear();
  for (int64_t l = 0; l < layers; ++l) {
    MlaLayerShape s = base;
    if (per_layer) {
      const Json& entries = top["per_layer_config"];
      const std::string key = std::to_string(l);
      if (entries.contains(key)) {
        s = ReadShape(ConfigReader(entries[key], source + " per_layer_config." + key), "", base,
                      /*swa_defaults=*/false);
      }
    } else if (config.sliding_layers[l]) {
      s = swa;
    }
    if (s.num_attention_heads <= 0 || s.q_lora_rank <= 0 || s.kv_lora_rank <= 0 ||
        s.qk_nope_head_dim <= 0 || s.qk_rope_head_dim <= 0 || s.v_head_dim <= 0 ||
        s.qk_rope_head_dim % 2 != 0) {
      Fail(source, ": layer ", l, "'s MLA shape must have positive dims and an even qk_rope_head_dim");
    }
    // Bounded like the top-level sizes, so that no weight dimension built from them overflows.
    const int64_t rows = SaturatingMul(
        s.num_attention_heads, SaturatingAdd(SaturatingAdd(s.qk_nope_head_dim, s.qk_rope_head_dim),
                                             s.v_head_dim));
    CheckDerivedSize(source,
                     StrCat("layer ", l, "'s num_attention_heads x (qk_head_dim + v_head_dim)"),
                     rows);
    CheckDerivedSize(source, StrCat("layer ", l, "'s q_lora_rank"), s.q_lora_rank);
    CheckDerivedSize(source, StrCat("layer ", l, "'s kv_lora_rank"), s.kv_lora_rank);
    if (indexed[l] && s.q_lora_rank != base.q_lora_rank) {
      Fail(source, ": DSA layer ", l, " must use the top-level q_lora_rank (its indexer reads the query latent)");
    }
    config.mla_layer_shapes.push_back(s);
  }
  // One rope per layer kind: the sliding layers must agree on their rotary dims, as must the others.
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t m = 0; m < l; ++m) {
      if (config.sliding_layers[l] == config.sliding_layers[m] &&
          config.mla_layer_shapes[l].qk_rope_head_dim != config.mla_layer_shapes[m].qk_rope_head_dim) {
        Fail(source, ": layers ", m, " and ", l, " are of one kind but rotate different dims");
      }
    }
  }
}

template <class T>
TensorTarget To(T* p) {
  return p != nullptr ? TensorTarget{p} : TensorTarget{};
}

// self_attn of layer `l` with its own shape, plus k_rope_only_layernorm and g_proj.
void Attention(const ModelConfig& c, int64_t l, DeepseekWeights* weights, const TensorVisitor& visit) {
  const MlaLayerShape s = c.LayerShape(l);
  const int64_t d = c.hidden_size;
  const int64_t h = s.num_attention_heads;
  const int64_t qk = s.qk_nope_head_dim + s.qk_rope_head_dim;
  AttentionWeights* w = weights != nullptr ? &weights->layers[l].attention : nullptr;
  const std::string a = StrCat("model.layers.", l, ".self_attn.");
  constexpr auto kLinear = WeightKind::kLinear;
  constexpr auto kNorm = WeightKind::kNorm;
  constexpr auto kQuantized = QuantizeRule::kWeightsAndActivations;
  constexpr auto kKeep = QuantizeRule::kKeep;
  auto add = [&](std::string name, Shape shape, WeightKind kind, QuantizeRule rule, TensorTarget target) {
    visit(ExpectedWeight{std::move(name), std::move(shape), kind, rule, target, Presence::kRequired});
  };
  add(a + "q_a_proj.weight", {s.q_lora_rank, d}, kLinear, kQuantized, To(w ? &w->q_a.emplace() : nullptr));
  add(a + "q_a_layernorm.weight", {s.q_lora_rank}, kNorm, kKeep, To(w ? &w->q_a_norm : nullptr));
  add(a + "q_b_proj.weight", {h * qk, s.q_lora_rank}, kLinear, kQuantized, To(w ? &w->q_b.emplace() : nullptr));
  add(a + "kv_a_proj_with_mqa.weight", {s.kv_lora_rank + s.qk_rope_head_dim, d}, kLinear, kQuantized,
      To(w ? &w->kv_a : nullptr));
  add(a + "kv_a_layernorm.weight", {s.kv_lora_rank}, kNorm, kKeep, To(w ? &w->kv_a_norm : nullptr));
  // kv_b's inputs stay f32 under w8a8, as for every family.
  add(a + "kv_b_proj.weight", {h * (s.qk_nope_head_dim + s.v_head_dim), s.kv_lora_rank}, kLinear,
      QuantizeRule::kWeights, To(w ? &w->kv_b : nullptr));
  add(a + "o_proj.weight", {d, h * s.v_head_dim}, kLinear, kQuantized, To(w ? &w->o : nullptr));
  add(a + "k_rope_only_layernorm.weight", {s.qk_rope_head_dim}, kNorm, kKeep,
      To(w ? &w->k_rope_norm : nullptr));
  add(a + "g_proj.weight", {h, d}, kLinear, kQuantized, To(w ? &w->gate_proj.emplace() : nullptr));
}

void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w, const TensorVisitor& visit) {
  DeepseekTensors t(c, layout, w, visit);
  t.Embedding();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    Attention(c, l, w, visit);
    if (c.HasIndexer(l)) t.DsaIndexer(l);
    c.IsMoeLayer(l) ? t.Moe(l) : t.DenseMlp(l);
    t.InputNorm(l);
    t.PostAttentionNorm(l);
  }
  t.FinalNorm();
  t.LmHead();
}

// The latent row of layer `l` at its own width; on a sliding layer a window row.
cache::CacheRowSpec LatentRow(const ModelConfig& c, CacheDType dtype, int64_t l) {
  const MlaLayerShape s = c.LayerShape(l);
  ModelConfig shaped = c;
  shaped.kv_lora_rank = s.kv_lora_rank;
  cache::CacheRowSpec row = MlaLatentRow(shaped, dtype, s.qk_rope_head_dim);
  if (c.IsSlidingLayer(l)) {
    row.retention = cache::Retention::kWindow;
    row.window_tokens = c.sliding_window;
  }
  return row;
}

// Every layer caches its latent at its own width (a window row on sliding layers); DSA layers
// also cache their indexer key.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  cache::ModelCacheRows rows(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    rows[l].push_back(LatentRow(c, dtype, l));
    if (c.HasIndexer(l)) rows[l].push_back(DsaIndexKeyRow(c, dtype));
  }
  return rows;
}

class Dots3Note final : public DeepseekModel {
 public:
  Dots3Note(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options,
                      /*index_rope_interleaved=*/true) {
    const ModelConfig& c = this->config();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const MlaLayerShape s = c.LayerShape(l);
      MlaDims d{s.num_attention_heads, s.q_lora_rank,      s.kv_lora_rank,
                s.qk_nope_head_dim,    s.qk_rope_head_dim, s.v_head_dim};
      d.q_a_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size) / s.q_lora_rank));
      d.latent_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size) / s.kv_lora_rank));
      d.norm_eps = static_cast<float>(c.rms_norm_eps);
      dims_.push_back(d);
      if (c.IsSlidingLayer(l) && sliding_rope_.dim == 0) {
        sliding_rope_ = ops::Rope::FromConfig(c.sliding_rope, d.rope, d.qk(), /*interleaved=*/true,
                                              /*round_bf16=*/false);
      } else if (!c.IsSlidingLayer(l) && full_rope_.dim == 0) {
        full_rope_ = ops::Rope::FromConfig(c.rope, d.rope, d.qk(), /*interleaved=*/true,
                                           /*round_bf16=*/false);
      }
    }
  }


 protected:
  // Each layer kind's own MLA shape and rope; a window on the sliding layers; DSA layers record
  // their selection. (Forward: DeepseekModel's plain pre-norm decoder around it.)
  void Attention(int64_t l, const ForwardBatch& batch, const float* x, AttentionForm form,
                 DsaSelection* selection, float* out, ForwardTrace* trace,
                 const float*) const override {
    const ModelConfig& c = config();
    const MlaDims& d = dims_[l];
    const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
    dump::Tensor("attn_in", l, x, tokens, c.hidden_size);
    const bool sliding = c.IsSlidingLayer(l);
    DsaLayer dsa;
    if (c.HasIndexer(l)) {
      dsa.indexer = &*layer(l).indexer;
      dsa.rope = &full_rope_;
      dsa.dims = {c.index_n_heads, c.index_head_dim, c.index_topk};
      dsa.selection = selection;
      dsa.index_row = kIndexRow;
    }
    MlaLayerOptions options;
    options.window = sliding ? c.sliding_window : 0;
    ops::MlaAttentionForward(d, layer(l).attention, sliding ? sliding_rope_ : full_rope_, l, batch,
                             x, c.hidden_size, form, c.HasIndexer(l) ? &dsa : nullptr, out,
                             /*query_scale=*/nullptr, kLatentRow, &options, attention_workspace());
    dump::Tensor("attn_out", l, out, tokens, c.hidden_size);
    if (trace != nullptr && c.HasIndexer(l)) trace->selected[l] = *selection;
  }

  std::vector<MlaDims> dims_;  // [layer]
  ops::Rope full_rope_, sliding_rope_;
};

Arch Make() {
  return WithModel<Dots3Note, ForEachTensor>(
      {.name = "dots3_note", .model_types = {"dots3_note_text"}, .defaults = Defaults(),
       .wrapper_model_types = {"dots3_note"}, .prepare = Prepare, .parse = Parse,
       .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(145, Make);

}  // namespace latent::model
