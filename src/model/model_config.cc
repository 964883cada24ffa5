#include "model/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"

namespace latent::model {
namespace {

using Json = nlohmann::json;

// Bounds on sizes in config.json, far above any real model's (DeepSeek V3: 61 layers, hidden
// 7168, vocabulary 129,280).
constexpr int64_t kMaxSize = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxLayers = 1 << 16;

// Reads typed fields from one JSON object and names `source` and the field in every error.
class FieldReader {
 public:
  FieldReader(const Json& object, std::string source)
      : object_(object), source_(std::move(source)) {}

  bool Has(const char* key) const { return object_.contains(key) && !object_[key].is_null(); }
  bool Present(const char* key) const { return object_.contains(key); }

  int64_t RequiredInt(const char* key) const {
    if (!Has(key)) Fail(source_, ": missing required field '", key, "'");
    return Int(key);
  }
  // A size: positive, and at most kMaxSize, so that no product of two sizes (a weight's element
  // count) overflows and no per-size allocation is absurd.
  int64_t PositiveInt(const char* key) const {
    int64_t v = RequiredInt(key);
    if (v <= 0) Fail(source_, ": field '", key, "' must be positive, got ", v);
    if (v > kMaxSize) Fail(source_, ": field '", key, "' is ", v, ", larger than any model (at most ", kMaxSize, ")");
    return v;
  }
  int64_t IntOr(const char* key, int64_t fallback) const { return Has(key) ? Int(key) : fallback; }
  double NumberOr(const char* key, double fallback) const {
    if (!Has(key)) return fallback;
    if (!object_[key].is_number()) Fail(source_, ": field '", key, "' must be a number");
    return object_[key].get<double>();
  }
  bool BoolOr(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    if (!object_[key].is_boolean()) Fail(source_, ": field '", key, "' must be true or false");
    return object_[key].get<bool>();
  }
  std::string StringOr(const char* key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    if (!object_[key].is_string()) Fail(source_, ": field '", key, "' must be a string");
    return object_[key].get<std::string>();
  }
  int64_t Int(const char* key) const {
    const Json& v = object_[key];
    if (!v.is_number_integer()) {
      // Some writers store integral values as 4096.0; accept those, refuse 1.5. The range check
      // comes first because casting 1e300 to int64 is undefined behaviour.
      if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
          std::fabs(v.get<double>()) < 0x1p63)
        return static_cast<int64_t>(v.get<double>());
      Fail(source_, ": field '", key, "' must be an integer, got ", v.dump());
    }
    // get<int64_t> would wrap 2^64 - 1 to -1, which can pass as a valid field.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      Fail(source_, ": field '", key, "' is out of range, got ", v.dump());
    }
    return v.get<int64_t>();
  }
  const Json& operator[](const char* key) const { return object_[key]; }
  const std::string& source() const { return source_; }

 private:
  const Json& object_;
  std::string source_;
};

// transformers' class defaults, used when config.json omits a non-dimension field, so that
// latent reads a checkpoint exactly as transformers does.
struct ArchDefaults {
  int64_t first_k_dense_replace;
  std::optional<int64_t> n_group, topk_group;
  int64_t n_shared_experts;
  double routed_scaling_factor;
  bool norm_topk_prob;
  TopkMethod topk_method;
  ScoringFunc scoring;
  int64_t max_position_embeddings;
  std::optional<int64_t> bos, eos;
};

ArchDefaults DefaultsFor(Architecture arch) {
  switch (arch) {
    case Architecture::kDeepseekV2:
      return {0, std::nullopt, std::nullopt, 2, 1.0, false, TopkMethod::kGreedy,
              ScoringFunc::kSoftmax, 2048, 1, 2};
    case Architecture::kDeepseekV3:
      return {3, 8, 4, 1, 2.5, true, TopkMethod::kNoauxTc, ScoringFunc::kSigmoid, 4096, 0, 1};
    case Architecture::kDeepseekV32:
      return {3, 8, 4, 1, 2.5, true, TopkMethod::kNoauxTc, ScoringFunc::kSigmoid, 163840, 0, 1};
    case Architecture::kGlmMoeDsa:
      return {3, 1, 1, 1, 2.5, true, TopkMethod::kNoauxTc, ScoringFunc::kSigmoid, 202752, 0, 1};
  }
  return {};
}

Architecture ParseModelType(const std::string& model_type, const std::string& source) {
  if (model_type == "deepseek_v2") return Architecture::kDeepseekV2;
  // Kimi K2 ships the DeepSeek V3 architecture under its own model_type.
  if (model_type == "deepseek_v3" || model_type == "kimi_k2") return Architecture::kDeepseekV3;
  if (model_type == "deepseek_v32") return Architecture::kDeepseekV32;
  if (model_type == "glm_moe_dsa") return Architecture::kGlmMoeDsa;
  Fail(source, ": unsupported model_type '", model_type, "' (supported: ", SupportedModelTypes(),
       ")");
}

void ParseRope(const FieldReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  // transformers 5 writes `rope_parameters` (with rope_theta inside); older checkpoints write
  // `rope_scaling` plus a top-level rope_theta. Accept either; when both exist they must agree.
  const Json* params = nullptr;
  std::string params_name;
  if (top.Has("rope_parameters")) {
    params = &top["rope_parameters"];
    params_name = "rope_parameters";
  }
  if (top.Has("rope_scaling")) {
    const Json& scaling = top["rope_scaling"];
    if (params != nullptr && !scaling.is_object()) Fail(source, ": 'rope_scaling' must be an object");
    if (params != nullptr) {
      for (auto it = scaling.begin(); it != scaling.end(); ++it) {
        std::string key = it.key() == "type" ? "rope_type" : it.key();
        if (params->contains(key) && (*params)[key] != *it) {
          Fail(source, ": contradictory rope settings: rope_scaling.", it.key(), " = ", it->dump(),
               " but rope_parameters.", key, " = ", (*params)[key].dump());
        }
      }
    } else {
      params = &scaling;
      params_name = "rope_scaling";
    }
  }
  double top_theta = top.NumberOr("rope_theta", 10000.0);
  if (params == nullptr) {
    config.rope.theta = top_theta;
    return;
  }
  if (!params->is_object()) Fail(source, ": '", params_name, "' must be an object");
  FieldReader rope(*params, source + " " + params_name);
  config.rope.theta = rope.NumberOr("rope_theta", top_theta);
  if (top.Has("rope_theta") && rope.Has("rope_theta") &&
      rope.NumberOr("rope_theta", 0) != top.NumberOr("rope_theta", 0)) {
    Fail(source, ": contradictory rope_theta: ", top["rope_theta"].dump(), " at top level, ",
         (*params)["rope_theta"].dump(), " in ", params_name);
  }
  std::string type = rope.StringOr("rope_type", rope.StringOr("type", "default"));
  if (type == "default") {
    config.rope.type = RopeType::kDefault;
  } else if (type == "yarn") {
    config.rope.type = RopeType::kYarn;
    if (!rope.Has("factor")) Fail(rope.source(), ": yarn needs 'factor'");
    config.rope.factor = rope.NumberOr("factor", 1.0);
    if (!(config.rope.factor > 0)) Fail(rope.source(), ": yarn 'factor' must be positive");
    config.rope.original_max_position_embeddings =
        rope.IntOr("original_max_position_embeddings", config.max_position_embeddings);
    if (config.rope.original_max_position_embeddings <= 0) {
      Fail(rope.source(), ": 'original_max_position_embeddings' must be positive");
    }
    // transformers reads `beta_fast or 32` and `beta_slow or 1`: zero means the default.
    config.rope.beta_fast = rope.NumberOr("beta_fast", 0.0);
    if (config.rope.beta_fast == 0) config.rope.beta_fast = 32.0;
    config.rope.beta_slow = rope.NumberOr("beta_slow", 0.0);
    if (config.rope.beta_slow == 0) config.rope.beta_slow = 1.0;
    config.rope.mscale = rope.NumberOr("mscale", 0.0);
    config.rope.mscale_all_dim = rope.NumberOr("mscale_all_dim", 0.0);
    if (rope.Has("attention_factor")) config.rope.attention_factor = rope.NumberOr("attention_factor", 1.0);
    config.rope.truncate = rope.BoolOr("truncate", true);
  } else {
    Fail(rope.source(), ": unsupported rope_type '", type, "' (supported: default, yarn)");
  }
}

void ParseQuantization(const FieldReader& top, ModelConfig& config) {
  if (!top.Has("quantization_config")) return;
  const Json& q = top["quantization_config"];
  if (!q.is_object()) Fail(top.source(), ": 'quantization_config' must be an object");
  FieldReader quant(q, top.source() + " quantization_config");
  std::string method = quant.StringOr("quant_method", "");
  if (method != "fp8") {
    Fail(quant.source(), ": unsupported quant_method '", method, "' (supported: fp8)");
  }
  std::string fmt = quant.StringOr("fmt", "e4m3");
  if (fmt != "e4m3") Fail(quant.source(), ": unsupported fp8 fmt '", fmt, "' (supported: e4m3)");
  config.quantization.fp8 = true;
  config.quantization.activation_scheme = quant.StringOr("activation_scheme", "dynamic");
  config.quantization.scale_fmt = quant.StringOr("scale_fmt", "");
  if (!quant.Has("weight_block_size") || !q["weight_block_size"].is_array() ||
      q["weight_block_size"].size() != 2 || !q["weight_block_size"][0].is_number_integer() ||
      !q["weight_block_size"][1].is_number_integer()) {
    Fail(quant.source(), ": 'weight_block_size' must be [rows, cols]");
  }
  config.quantization.block_n = q["weight_block_size"][0].get<int64_t>();
  config.quantization.block_k = q["weight_block_size"][1].get<int64_t>();
  if (config.quantization.block_n <= 0 || config.quantization.block_k <= 0) {
    Fail(quant.source(), ": 'weight_block_size' entries must be positive");
  }
}

std::vector<int64_t> ParseEos(const FieldReader& top, std::optional<int64_t> fallback) {
  if (!top.Present("eos_token_id")) return fallback ? std::vector<int64_t>{*fallback} : std::vector<int64_t>{};
  const Json& v = top["eos_token_id"];
  if (v.is_null()) return {};
  if (v.is_number_integer()) return {v.get<int64_t>()};
  if (v.is_array()) {
    std::vector<int64_t> ids;
    for (const Json& id : v) {
      if (!id.is_number_integer()) Fail(top.source(), ": 'eos_token_id' entries must be integers");
      ids.push_back(id.get<int64_t>());
    }
    return ids;
  }
  Fail(top.source(), ": 'eos_token_id' must be an integer or a list of integers");
}

void ParseMoe(const FieldReader& top, const ArchDefaults& d, ModelConfig& config) {
  const std::string& source = top.source();
  config.n_routed_experts = top.IntOr("n_routed_experts", 0);
  if (config.n_routed_experts < 0) Fail(source, ": 'n_routed_experts' must not be negative");
  config.first_k_dense_replace = top.IntOr("first_k_dense_replace", d.first_k_dense_replace);
  config.moe_layer_freq = top.IntOr("moe_layer_freq", 1);
  config.n_shared_experts = top.IntOr("n_shared_experts", d.n_shared_experts);
  config.routed_scaling_factor = top.NumberOr("routed_scaling_factor", d.routed_scaling_factor);
  config.norm_topk_prob = top.BoolOr("norm_topk_prob", d.norm_topk_prob);
  if (config.n_routed_experts == 0) return;
  if (config.architecture == Architecture::kDeepseekV2 && config.norm_topk_prob) {
    // transformers' V2 router never renormalises; refuse rather than silently disagree.
    Fail(source, ": norm_topk_prob true is not supported for deepseek_v2 (transformers ignores it)");
  }

  config.num_experts_per_tok = top.PositiveInt("num_experts_per_tok");
  config.moe_intermediate_size = top.PositiveInt("moe_intermediate_size");
  if (config.moe_layer_freq != 1) {
    // transformers makes every layer past first_k_dense_replace MoE whatever this says, and
    // every released checkpoint uses 1; refuse rather than silently disagree with it.
    Fail(source, ": moe_layer_freq ", config.moe_layer_freq,
         " is not supported (transformers ignores it; released checkpoints use 1)");
  }
  if (config.n_shared_experts < 0) Fail(source, ": 'n_shared_experts' must not be negative");
  if (config.num_experts_per_tok > config.n_routed_experts) {
    Fail(source, ": num_experts_per_tok (", config.num_experts_per_tok,
         ") exceeds n_routed_experts (", config.n_routed_experts, ")");
  }

  const bool v2 = config.architecture == Architecture::kDeepseekV2;
  std::string method = top.StringOr("topk_method", v2 ? "greedy" : "noaux_tc");
  if (method == "greedy" && v2) {
    config.topk_method = TopkMethod::kGreedy;
  } else if (method == "group_limited_greedy" && v2) {
    config.topk_method = TopkMethod::kGroupLimitedGreedy;
  } else if (method == "noaux_tc" && !v2) {
    config.topk_method = TopkMethod::kNoauxTc;
  } else {
    Fail(source, ": topk_method '", method, "' is not supported for model_type '",
         config.model_type, "' (", v2 ? "greedy, group_limited_greedy" : "noaux_tc", ")");
  }
  // V2 routes with softmax scores, V3 with sigmoid scores; the field, when present, must agree.
  config.scoring_func = d.scoring;
  std::string scoring = top.StringOr("scoring_func", ScoringFuncName(d.scoring));
  if (scoring != ScoringFuncName(d.scoring)) {
    Fail(source, ": scoring_func '", scoring, "' contradicts model_type '", config.model_type,
         "', which routes with ", ScoringFuncName(d.scoring));
  }

  const bool grouped = config.topk_method != TopkMethod::kGreedy;
  if (grouped) {
    if (!top.Has("n_group") && !d.n_group) Fail(source, ": topk_method '", method, "' needs 'n_group'");
    if (!top.Has("topk_group") && !d.topk_group) Fail(source, ": topk_method '", method, "' needs 'topk_group'");
  }
  config.n_group = top.IntOr("n_group", d.n_group.value_or(1));
  config.topk_group = top.IntOr("topk_group", d.topk_group.value_or(1));
  if (!grouped) return;
  if (config.n_group <= 0 || config.topk_group <= 0) {
    Fail(source, ": n_group and topk_group must be positive");
  }
  if (config.n_routed_experts % config.n_group != 0) {
    Fail(source, ": n_routed_experts (", config.n_routed_experts, ") is not divisible by n_group (",
         config.n_group, ")");
  }
  if (config.topk_group > config.n_group) {
    Fail(source, ": topk_group (", config.topk_group, ") exceeds n_group (", config.n_group, ")");
  }
  const int64_t per_group = config.n_routed_experts / config.n_group;
  if (config.topk_group * per_group < config.num_experts_per_tok) {
    Fail(source, ": topk_group (", config.topk_group, ") groups of ", per_group,
         " experts cannot supply num_experts_per_tok (", config.num_experts_per_tok, ")");
  }
  if (config.topk_method == TopkMethod::kNoauxTc && per_group < 2) {
    // noaux_tc scores a group by the sum of its two best experts.
    Fail(source, ": noaux_tc needs at least 2 experts per group, got ", per_group);
  }
}

// Per-layer list of `names[0]` / `names[1]` strings -> bools (true for names[1]).
std::vector<bool> ParseLayerKinds(const FieldReader& top, const char* key, int64_t layers,
                                  const char* no, const char* yes) {
  const Json& list = top[key];
  if (!list.is_array() || static_cast<int64_t>(list.size()) != layers) {
    Fail(top.source(), ": '", key, "' must list one entry per layer (", layers, ")");
  }
  std::vector<bool> kinds;
  for (const Json& v : list) {
    if (v == no) {
      kinds.push_back(false);
    } else if (v == yes) {
      kinds.push_back(true);
    } else {
      Fail(top.source(), ": '", key, "' entries must be \"", no, "\" or \"", yes, "\", got ", v.dump());
    }
  }
  return kinds;
}

void ParseLayerTypes(const FieldReader& top, ModelConfig& config) {
  const int64_t layers = config.num_hidden_layers;
  if (top.Has("mlp_layer_types")) {
    config.moe_layers = ParseLayerKinds(top, "mlp_layer_types", layers, "dense", "sparse");
  } else {
    for (int64_t l = 0; l < layers; ++l) {
      config.moe_layers.push_back(config.n_routed_experts > 0 && l >= config.first_k_dense_replace &&
                                  l % config.moe_layer_freq == 0);
    }
  }
  for (int64_t l = 0; l < layers; ++l) {
    if (config.moe_layers[l] && config.n_routed_experts == 0) {
      Fail(top.source(), ": layer ", l, " is sparse (MoE) but n_routed_experts is 0");
    }
  }
}

void ParseDsa(const FieldReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  if (!config.q_lora_rank) Fail(source, ": ", config.model_type, " needs q_lora_rank (the indexer reads the query latent)");
  config.index_n_heads = top.IntOr("index_n_heads", config.architecture == Architecture::kGlmMoeDsa ? 32 : 64);
  config.index_head_dim = top.IntOr("index_head_dim", 128);
  config.index_topk = top.IntOr("index_topk", 2048);
  if (config.index_n_heads <= 0 || config.index_head_dim <= 0 || config.index_topk <= 0) {
    Fail(source, ": index_n_heads, index_head_dim and index_topk must be positive");
  }
  if (config.index_head_dim < config.qk_rope_head_dim) {
    Fail(source, ": index_head_dim (", config.index_head_dim, ") is smaller than qk_rope_head_dim (",
         config.qk_rope_head_dim, "), which the indexer rotates");
  }
  const int64_t layers = config.num_hidden_layers;
  if (config.architecture != Architecture::kGlmMoeDsa) {
    config.indexer_layers.assign(layers, true);
    return;
  }
  // GLM IndexShare: "full" layers run the indexer, "shared" ones reuse the previous selection.
  if (top.Has("indexer_types")) {
    config.indexer_layers = ParseLayerKinds(top, "indexer_types", layers, "shared", "full");
  } else if (top.Has("index_topk_pattern")) {
    const std::string pattern = top.StringOr("index_topk_pattern", "");
    if (static_cast<int64_t>(pattern.size()) != layers || pattern.find_first_not_of("FS") != std::string::npos) {
      Fail(source, ": 'index_topk_pattern' must be one F or S per layer");
    }
    for (char c : pattern) config.indexer_layers.push_back(c == 'F');
  } else {
    const int64_t freq = std::max<int64_t>(top.IntOr("index_topk_freq", 1), 1);
    const int64_t offset = top.IntOr("index_skip_topk_offset", 2);
    for (int64_t i = 0; i < layers; ++i) config.indexer_layers.push_back(std::max<int64_t>(i - offset + 1, 0) % freq == 0);
  }
  if (!config.indexer_layers[0]) Fail(source, ": layer 0 is a shared indexer layer, but no earlier layer selects for it");
}

}  // namespace

std::string SupportedModelTypes() { return "deepseek_v2, deepseek_v3, kimi_k2, deepseek_v32, glm_moe_dsa"; }

const char* ArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kDeepseekV2: return "deepseek_v2";
    case Architecture::kDeepseekV3: return "deepseek_v3";
    case Architecture::kDeepseekV32: return "deepseek_v32";
    case Architecture::kGlmMoeDsa: return "glm_moe_dsa";
  }
  return "?";
}
const char* TopkMethodName(TopkMethod method) {
  switch (method) {
    case TopkMethod::kGreedy: return "greedy";
    case TopkMethod::kGroupLimitedGreedy: return "group_limited_greedy";
    case TopkMethod::kNoauxTc: return "noaux_tc";
  }
  return "?";
}
const char* ScoringFuncName(ScoringFunc func) {
  return func == ScoringFunc::kSoftmax ? "softmax" : "sigmoid";
}

ModelConfig ModelConfig::FromJson(const std::string& text, const std::string& source) {
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Json::exception& e) {
    Fail(source, ": invalid JSON: ", e.what());
  }
  if (!json.is_object()) Fail(source, ": not a JSON object");
  FieldReader top(json, source);

  ModelConfig config;
  if (!top.Has("model_type")) {
    Fail(source, ": missing 'model_type' (supported: ", SupportedModelTypes(), ")");
  }
  config.model_type = top.StringOr("model_type", "");
  config.architecture = ParseModelType(config.model_type, source);
  const ArchDefaults d = DefaultsFor(config.architecture);

  config.vocab_size = top.PositiveInt("vocab_size");
  config.hidden_size = top.PositiveInt("hidden_size");
  config.intermediate_size = top.PositiveInt("intermediate_size");
  config.num_hidden_layers = top.PositiveInt("num_hidden_layers");
  if (config.num_hidden_layers > kMaxLayers) {
    Fail(source, ": field 'num_hidden_layers' is ", config.num_hidden_layers,
         ", larger than any model (at most ", kMaxLayers, ")");
  }
  config.num_attention_heads = top.PositiveInt("num_attention_heads");
  config.max_position_embeddings = top.IntOr("max_position_embeddings", d.max_position_embeddings);
  if (config.max_position_embeddings <= 0) Fail(source, ": 'max_position_embeddings' must be positive");
  if (config.max_position_embeddings > kMaxSize) {
    Fail(source, ": 'max_position_embeddings' is ", config.max_position_embeddings,
         ", larger than any model (at most ", kMaxSize, ")");
  }
  config.rms_norm_eps = top.NumberOr("rms_norm_eps", 1e-6);
  if (!(config.rms_norm_eps > 0)) Fail(source, ": 'rms_norm_eps' must be positive");
  config.tie_word_embeddings = top.BoolOr("tie_word_embeddings", false);
  config.hidden_act = top.StringOr("hidden_act", "silu");
  if (config.hidden_act != "silu") {
    Fail(source, ": hidden_act '", config.hidden_act, "' is not supported (supported: silu)");
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (top.BoolOr(bias, false)) Fail(source, ": '", bias, "' true is not supported");
  }

  // q_lora_rank may be null (V2-Lite, Moonlight) but must be stated: its default (1536) is a
  // full-size value that a tiny or custom checkpoint would never want by accident.
  if (!top.Present("q_lora_rank")) Fail(source, ": missing field 'q_lora_rank' (null for none)");
  if (top.Has("q_lora_rank")) config.q_lora_rank = top.PositiveInt("q_lora_rank");
  config.kv_lora_rank = top.PositiveInt("kv_lora_rank");
  config.qk_nope_head_dim = top.PositiveInt("qk_nope_head_dim");
  config.qk_rope_head_dim = top.PositiveInt("qk_rope_head_dim");
  config.v_head_dim = top.PositiveInt("v_head_dim");
  if (config.qk_rope_head_dim % 2 != 0) {
    Fail(source, ": qk_rope_head_dim (", config.qk_rope_head_dim, ") must be even for rotary pairs");
  }
  // V2 rotates adjacent pairs through its complex form (the interleaved pairing) and has no
  // such field; V3.2 and GLM-5 always interleave; V3 reads it, default true.
  config.rope_interleave = config.architecture != Architecture::kDeepseekV3 ||
                           top.BoolOr("rope_interleave", true);
  ParseRope(top, config);
  ParseMoe(top, d, config);
  ParseLayerTypes(top, config);
  if (config.architecture == Architecture::kDeepseekV32 || config.architecture == Architecture::kGlmMoeDsa) {
    ParseDsa(top, config);
  }
  ParseQuantization(top, config);

  config.dtype = top.StringOr("dtype", top.StringOr("torch_dtype", "float32"));
  if (top.Present("bos_token_id")) {
    if (top.Has("bos_token_id")) config.bos_token_id = top.Int("bos_token_id");
  } else {
    config.bos_token_id = d.bos;
  }
  config.eos_token_ids = ParseEos(top, d.eos);
  return config;
}

ModelConfig ModelConfig::Load(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) Fail(path, ": cannot open (is ", dir, " a Hugging Face checkpoint directory?)");
  std::stringstream text;
  text << in.rdbuf();
  return FromJson(text.str(), path);
}

}  // namespace latent::model
