#include "model/model_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.h"
#include "base/input_file.h"
#include "base/saturating.h"
#include "model/arch/registry.h"
#include "model/config_reader.h"
#include "model/injected_stall.h"

namespace latent::model {
namespace {

// LongRoPE (MiniCPM3, Phi-3): short and long divisors of the rotary frequencies; transformers
// needs original_max_position_embeddings in the rope settings to switch between them.
void ParseLongRope(const ConfigReader& rope, ModelConfig& config) {
  const std::string& source = rope.source();
  config.rope.type = RopeType::kLongRope;
  const int64_t half = config.qk_rope_head_dim / 2;
  for (const char* key : {"short_factor", "long_factor"}) {
    if (!rope.Has(key) || !rope[key].is_array() || static_cast<int64_t>(rope[key].size()) != half) {
      Fail(source, ": longrope needs '", key, "' as a list of ", half, " numbers (qk_rope_head_dim / 2)");
    }
    std::vector<double>& out = key[0] == 's' ? config.rope.short_factor : config.rope.long_factor;
    for (const Json& v : rope[key]) {
      if (!v.is_number() || !(v.get<double>() > 0)) Fail(source, ": '", key, "' entries must be positive numbers");
      out.push_back(v.get<double>());
    }
  }
  if (!rope.Has("original_max_position_embeddings")) {
    Fail(source, ": longrope needs 'original_max_position_embeddings'");
  }
  config.rope.original_max_position_embeddings = rope.Int("original_max_position_embeddings");
  if (config.rope.original_max_position_embeddings <= 0) {
    Fail(source, ": 'original_max_position_embeddings' must be positive");
  }
  // Unstated, transformers takes max_position_embeddings / original as the factor.
  config.rope.factor = rope.NumberOr(
      "factor", static_cast<double>(config.max_position_embeddings) /
                    static_cast<double>(config.rope.original_max_position_embeddings));
  if (!(config.rope.factor > 0)) Fail(source, ": longrope 'factor' must be positive");
  if (rope.Has("attention_factor")) config.rope.attention_factor = rope.NumberOr("attention_factor", 1.0);
}

// A scaled type's `factor`: required (transformers reads rope_parameters["factor"]) and positive.
double RequiredFactor(const ConfigReader& rope, const std::string& type) {
  if (!rope.Has("factor")) Fail(rope.source(), ": ", type, " needs 'factor'");
  const double factor = rope.NumberOr("factor", 1.0);
  if (!(factor > 0)) Fail(rope.source(), ": ", type, " 'factor' must be positive");
  return factor;
}

// Llama 3's frequency-dependent scaling (transformers' _compute_llama3_parameters): its four keys
// are required there too. high_freq_factor must exceed low_freq_factor, or the interpolation
// between the two wavelengths divides by zero.
void ParseLlama3Rope(const ConfigReader& rope, ModelConfig& config) {
  config.rope.type = RopeType::kLlama3;
  config.rope.factor = RequiredFactor(rope, "llama3");
  for (const char* key :
       {"original_max_position_embeddings", "low_freq_factor", "high_freq_factor"}) {
    if (!rope.Has(key)) Fail(rope.source(), ": llama3 needs '", key, "'");
  }
  config.rope.original_max_position_embeddings = rope.Int("original_max_position_embeddings");
  if (config.rope.original_max_position_embeddings <= 0) {
    Fail(rope.source(), ": 'original_max_position_embeddings' must be positive");
  }
  config.rope.low_freq_factor = rope.NumberOr("low_freq_factor", 1.0);
  config.rope.high_freq_factor = rope.NumberOr("high_freq_factor", 4.0);
  if (!(config.rope.low_freq_factor > 0) ||
      !(config.rope.high_freq_factor > config.rope.low_freq_factor)) {
    Fail(rope.source(), ": llama3 needs 0 < low_freq_factor < high_freq_factor, got ",
         config.rope.low_freq_factor, " and ", config.rope.high_freq_factor);
  }
}

// YaRN's beta_fast or beta_slow: a number of rotations, `fallback` when 0 or unstated.
double YarnBeta(const ConfigReader& rope, const char* key, double fallback) {
  const double beta = rope.NumberOr(key, 0.0);
  if (beta < 0) {
    Fail(rope.source(), ": yarn '", key, "' must be positive (0 or unstated: ", fallback,
         "), got ", beta);
  }
  return beta == 0 ? fallback : beta;
}

void ParseRope(const ConfigReader& top, ModelConfig& config) {
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
  // Zero or a negative theta would make every rotary frequency NaN, silently.
  double top_theta = top.PositiveNumberOr("rope_theta", 10000.0);
  if (params == nullptr) {
    config.rope.theta = top_theta;
    return;
  }
  if (!params->is_object()) Fail(source, ": '", params_name, "' must be an object");
  ConfigReader rope(*params, source + " " + params_name);
  config.rope.theta = rope.PositiveNumberOr("rope_theta", top_theta);
  if (top.Has("rope_theta") && rope.Has("rope_theta") &&
      rope.NumberOr("rope_theta", 0) != top.NumberOr("rope_theta", 0)) {
    Fail(source, ": contradictory rope_theta: ", top["rope_theta"].dump(), " at top level, ",
         (*params)["rope_theta"].dump(), " in ", params_name);
  }
  std::string type = rope.StringOr("rope_type", rope.StringOr("type", "default"));
  // Every type but default scales the softmax by mscale(factor, mscale_all_dim)^2 when set.
  config.rope.mscale_all_dim = rope.NumberOr("mscale_all_dim", 0.0);
  if (type == "default") {
    config.rope.type = RopeType::kDefault;
    config.rope.mscale_all_dim = 0.0;
  } else if (type == "linear") {
    config.rope.type = RopeType::kLinear;
    config.rope.factor = RequiredFactor(rope, type);
  } else if (type == "llama3") {
    ParseLlama3Rope(rope, config);
  } else if (type == "dynamic") {
    // transformers recomputes dynamic NTK frequencies from the longest sequence of each forward
    // call, so under continuous batching a request's output would depend on what else runs.
    Fail(rope.source(), ": rope_type 'dynamic' is not supported: its frequencies follow the "
         "longest sequence in each batch, so outputs would depend on the load (supported: default, "
         "linear, llama3, yarn, longrope)");
  } else if (type == "yarn") {
    config.rope.type = RopeType::kYarn;
    config.rope.factor = RequiredFactor(rope, type);
    config.rope.original_max_position_embeddings =
        rope.IntOr("original_max_position_embeddings", config.max_position_embeddings);
    if (config.rope.original_max_position_embeddings <= 0) {
      Fail(rope.source(), ": 'original_max_position_embeddings' must be positive");
    }
    // transformers reads `beta_fast or 32` and `beta_slow or 1`: zero means the default. A
    // negative one is refused there (math.log of a negative number of rotations); here it made
    // every frequency NaN.
    config.rope.beta_fast = YarnBeta(rope, "beta_fast", 32.0);
    config.rope.beta_slow = YarnBeta(rope, "beta_slow", 1.0);
    config.rope.mscale = rope.NumberOr("mscale", 0.0);
    if (rope.Has("attention_factor")) config.rope.attention_factor = rope.NumberOr("attention_factor", 1.0);
    config.rope.truncate = rope.BoolOr("truncate", true);
  } else if (type == "longrope") {
    ParseLongRope(rope, config);
  } else {
    Fail(rope.source(), ": unsupported rope_type '", type,
         "' (supported: default, linear, llama3, yarn, longrope)");
  }
}

void ParseQuantization(const ConfigReader& top, ModelConfig& config) {
  if (!top.Has("quantization_config")) return;
  const Json& q = top["quantization_config"];
  if (!q.is_object()) Fail(top.source(), ": 'quantization_config' must be an object");
  ConfigReader quant(q, top.source() + " quantization_config");
  std::string method = quant.StringOr("quant_method", "");
  if (method != "fp8") {
    Fail(quant.source(), ": unsupported quant_method '", method, "' (supported: fp8)");
  }
  std::string fmt = quant.StringOr("fmt", "e4m3");
  if (fmt != "e4m3") Fail(quant.source(), ": unsupported fp8 fmt '", fmt, "' (supported: e4m3)");
  config.quantization.fp8 = true;
  // transformers lowercases the scheme and takes "dynamic" or "static"; static means one stored
  // activation scale per tensor, which latent does not read (it scales activations per token
  // group at run time), so it is refused rather than ignored, as vLLM refuses it with blocks.
  std::string scheme = quant.StringOr("activation_scheme", "dynamic");
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (scheme == "static") {
    Fail(quant.source(), ": activation_scheme 'static' is not supported: latent quantizes "
         "activations at run time (dynamic) and does not read stored activation scales");
  }
  if (scheme != "dynamic") {
    Fail(quant.source(), ": unknown activation_scheme '", quant.StringOr("activation_scheme", ""),
         "' (supported: dynamic)");
  }
  config.quantization.activation_scheme = scheme;
  // transformers' FineGrainedFP8Config takes "float" (its default) or "ue8m0"; null or absent is
  // the default here. The scales' stored dtype is what latent reads either way.
  config.quantization.scale_fmt = quant.StringOr("scale_fmt", "");
  const std::string& scale_fmt = config.quantization.scale_fmt;
  if (!scale_fmt.empty() && scale_fmt != "float" && scale_fmt != "ue8m0") {
    Fail(quant.source(), ": unknown scale_fmt '", scale_fmt, "' (supported: float, ue8m0)");
  }
  if (!quant.Has("weight_block_size") || !q["weight_block_size"].is_array() ||
      q["weight_block_size"].size() != 2 || !q["weight_block_size"][0].is_number_integer() ||
      !q["weight_block_size"][1].is_number_integer()) {
    Fail(quant.source(), ": 'weight_block_size' must be [rows, cols]");
  }
  // Bounded like any size: a block past every weight's dimension would overflow the scale
  // shape's ceil(rows / block_n), and get<int64_t> would wrap 2^64 - 1 to -1.
  int64_t block[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const Json& v = q["weight_block_size"][i];
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{kMaxConfigSize}
                                             : v.get<int64_t>() <= kMaxConfigSize;
    if (!fits || v.get<int64_t>() <= 0) {
      Fail(quant.source(), ": 'weight_block_size' entries must be positive and at most ",
           kMaxConfigSize, ", got ", q["weight_block_size"].dump());
    }
    block[i] = v.get<int64_t>();
  }
  config.quantization.block_n = block[0];
  config.quantization.block_k = block[1];
}

// The family's default applies only when the file does not state the field.
std::vector<int64_t> ParseEos(const ConfigReader& top, std::optional<int64_t> fallback,
                              int64_t vocab_size) {
  if (!top.Present("eos_token_id")) return fallback ? std::vector<int64_t>{*fallback} : std::vector<int64_t>{};
  return ParseEosTokenIds(top["eos_token_id"], top.source(), vocab_size);
}

void ParseMoe(const ConfigReader& top, const ArchDefaults& d, ModelConfig& config) {
  const std::string& source = top.source();
  config.n_routed_experts = top.SizeOr("n_routed_experts", 0, /*min=*/0);
  if (top.Present("first_k_dense_replace") && !top.Has("first_k_dense_replace") &&
      (d.null_first_dense == NullFirstDense::kFails ||
       (d.null_first_dense == NullFirstDense::kFailsWithoutLayerTypes &&
        !top.Has("mlp_layer_types")))) {
    // Not the default: transformers cannot build such a model (ArchDefaults::null_first_dense).
    Fail(source, ": 'first_k_dense_replace' is null (transformers fails on it): state it or "
         "leave it out");
  }
  // Negative, every layer would be MoE, the first ones' missing router then named as a missing
  // tensor rather than the field; past the layers, every layer is dense (transformers' reading).
  config.first_k_dense_replace =
      top.SizeOr("first_k_dense_replace", d.first_k_dense_replace, /*min=*/0);
  // moe_layer_freq is not read: of transformers' classes only AXK1's, AXK2's and Dots3 Note's
  // take it, when they derive mlp_layer_types (DeriveMlpLayerTypes, in their Arch::prepare);
  // every other class ignores it (DeepseekV2/V3 and Mistral4 decoder layers are MoE from
  // first_k_dense_replace on), and so does latent. (vLLM's DeepSeek model honours it; a
  // checkpoint made that way lacks the expert tensors of the layers it skips, which the weight
  // table then names.)
  // Checked here, before a dense config returns: a negative count is wrong whatever the layers.
  config.n_shared_experts = top.SizeOr("n_shared_experts", d.n_shared_experts, /*min=*/0);
  config.routed_scaling_factor = top.NumberOr("routed_scaling_factor", d.routed_scaling_factor);
  config.norm_topk_prob = top.BoolOr("norm_topk_prob", d.norm_topk_prob);
  if (config.n_routed_experts == 0) return;

  config.num_experts_per_tok = top.PositiveInt("num_experts_per_tok");
  config.moe_intermediate_size = top.PositiveInt("moe_intermediate_size");
  if (config.num_experts_per_tok > config.n_routed_experts) {
    Fail(source, ": num_experts_per_tok (", config.num_experts_per_tok,
         ") exceeds n_routed_experts (", config.n_routed_experts, ")");
  }

  // The family routes with some top-k methods only; the field, when present, must name one.
  std::string method = top.StringOr("topk_method", TopkMethodName(d.topk_methods.front()));
  std::string supported;
  bool found = false;
  for (TopkMethod m : d.topk_methods) {
    supported += (supported.empty() ? "" : ", ") + std::string(TopkMethodName(m));
    if (method == TopkMethodName(m)) {
      config.topk_method = m;
      found = true;
    }
  }
  if (!found) {
    Fail(source, ": topk_method '", method, "' is not supported for model_type '",
         config.model_type, "' (", supported, ")");
  }
  // A family routes with one scoring function (V2 softmax, V3 sigmoid); the field, when present,
  // must agree.
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
  if (!grouped) {
    // Greedy routing has no groups: whatever the file says about them is unused, so the config
    // holds one group of all experts rather than values nothing has validated.
    config.n_group = 1;
    config.topk_group = 1;
    return;
  }
  config.n_group = top.IntOr("n_group", d.n_group.value_or(1));
  config.topk_group = top.IntOr("topk_group", d.topk_group.value_or(1));
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

}  // namespace

void CheckDerivedSize(const std::string& source, const std::string& what, int64_t size) {
  if (size > kMaxConfigSize) {
    Fail(source, ": ", what, " is ", size == INT64_MAX ? "past int64" : std::to_string(size),
         ", larger than any model (at most ", kMaxConfigSize, ")");
  }
}

std::vector<int64_t> ParseEosTokenIds(const Json& value, const std::string& file,
                                      int64_t vocab_size) {
  if (value.is_null()) return {};
  if (!value.is_number_integer() && !value.is_array()) {
    Fail(file, ": 'eos_token_id' must be an integer or a list of integers");
  }
  std::vector<int64_t> ids;
  for (const Json& id : value.is_array() ? value : Json::array({value})) {
    if (!id.is_number_integer()) Fail(file, ": 'eos_token_id' entries must be integers");
    // An id outside the vocabulary is never sampled, so generation would never stop (transformers
    // warns for a negative one and says nothing otherwise); get<int64_t> would also wrap 2^64 - 1
    // to -1.
    const bool in_vocab = id.is_number_unsigned()
                              ? id.get<uint64_t>() < static_cast<uint64_t>(vocab_size)
                              : id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size;
    if (!in_vocab) {
      Fail(file, ": 'eos_token_id' ", id.dump(), " is not a token id (vocab_size ", vocab_size,
           ": ids are 0 to ", vocab_size - 1, ")");
    }
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

void ReadMoeKeyAliases(Json& json, const std::string& source) {
  static const std::pair<const char*, const char*> kAliases[] = {
      {"num_experts", "n_routed_experts"},
      {"num_local_experts", "n_routed_experts"},
      {"num_experts_per_token", "num_experts_per_tok"},
      {"moe_renormalize", "norm_topk_prob"},
      {"num_expert_group", "n_group"},
      {"num_shared_experts", "n_shared_experts"},
      {"model_max_length", "max_position_embeddings"},
  };
  for (const auto& [alias, key] : kAliases) {
    if (!json.contains(alias) || json[alias].is_null()) continue;
    if (json.contains(key) && !json[key].is_null() && json[key] != json[alias]) {
      Fail(source, ": '", alias, "' (", json[alias].dump(), ") and '", key, "' (", json[key].dump(),
           ") disagree");
    }
    json[key] = json[alias];
  }
}

void IgnoreMlpLayerTypes(Json& json, const std::string& /*source*/) {
  json.erase("mlp_layer_types");
}

void DeriveMlpLayerTypes(Json& json, const std::string& source, int64_t default_first_dense,
                         MoeLayerFreq form) {
  if (!json.is_object()) return;  // the common parser names the problem
  const ConfigReader top(json, source);
  if (!top.Has("mlp_layer_types")) {
    const int64_t layers = top.PositiveInt("num_hidden_layers");
    if (layers > kMaxConfigLayers) return;  // the common parser names the problem
    // The classes default a missing key only: a stated null reaches their comparison and
    // raises TypeError, so it is refused here rather than read as the default.
    for (const char* key : {"first_k_dense_replace", "moe_layer_freq"}) {
      if (top.Present(key) && !top.Has(key)) {
        Fail(source, ": '", key, "' is null (transformers fails on it): state it or leave it out");
      }
    }
    const int64_t first_dense = top.SizeOr("first_k_dense_replace", default_first_dense, 0);
    const bool per_layer = form == MoeLayerFreq::kNumberOrList && top.Has("moe_layer_freq") &&
                           top["moe_layer_freq"].is_array();
    int64_t every = 1;
    if (!per_layer) {
      every = top.IntOr("moe_layer_freq", 1);
      // transformers raises ZeroDivisionError at 0 (where a layer reaches it) but takes a
      // negative -k as k (l % -k == 0 where k divides l); latent refuses both, which no
      // checkpoint states.
      if (every <= 0) Fail(source, ": 'moe_layer_freq' must be positive, got ", every);
    } else if (const int64_t n = static_cast<int64_t>(top["moe_layer_freq"].size());
               n < layers && first_dense < layers) {
      // transformers indexes the list at every layer from first_k_dense_replace on.
      Fail(source, ": 'moe_layer_freq' lists ", n, " entries for ", layers, " layers");
    }
    Json kinds = Json::array();
    for (int64_t l = 0; l < layers; ++l) {
      bool moe = l >= first_dense;
      if (moe && per_layer) {
        const Json& on = top["moe_layer_freq"][l];  // truthy as Python's bool() reads it
        if (!on.is_boolean() && !on.is_number()) {
          Fail(source, ": 'moe_layer_freq' entries must be numbers or booleans, got ", on.dump());
        }
        moe = on.is_boolean() ? on.get<bool>() : on.get<double>() != 0;
      } else if (moe) {
        moe = l % every == 0;
      }
      kinds.push_back(moe ? "sparse" : "dense");
    }
    json["mlp_layer_types"] = std::move(kinds);
  }
  json.erase("moe_layer_freq");
}

std::vector<bool> ParseLayerKinds(const ConfigReader& top, const char* key, int64_t layers,
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

namespace {

void ParseLayerTypes(const ConfigReader& top, ModelConfig& config) {
  const int64_t layers = config.num_hidden_layers;
  if (top.Has("mlp_layer_types")) {
    config.moe_layers = ParseLayerKinds(top, "mlp_layer_types", layers, "dense", "sparse");
  } else {
    for (int64_t l = 0; l < layers; ++l) {
      config.moe_layers.push_back(config.n_routed_experts > 0 && l >= config.first_k_dense_replace);
    }
  }
  for (int64_t l = 0; l < layers; ++l) {
    if (config.moe_layers[l] && config.n_routed_experts == 0) {
      Fail(top.source(), ": layer ", l, " is sparse (MoE) but n_routed_experts is 0");
    }
  }
}

}  // namespace

void ParseIndexedLayerTypes(const ConfigReader& top, const ModelConfig& config) {
  if (!top.Has("layer_types")) return;
  const Json& types = top["layer_types"];
  const int64_t layers = config.num_hidden_layers;
  // transformers' validate_layer_type refuses a list of another length.
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers) {
    Fail(top.source(), ": 'layer_types' must list one entry per layer (", layers, "), got ",
         types.is_array() ? std::to_string(types.size()) + " entries" : types.dump());
  }
  for (size_t l = 0; l < types.size(); ++l) {
    if (types[l] != "indexed_attention") {
      Fail(top.source(), ": 'layer_types' entry ", l, " is ", types[l].dump(), ", but every ",
           config.model_type, " layer is \"indexed_attention\" (DSA)");
    }
  }
}

void ParseDsaIndexer(const ConfigReader& top, ModelConfig& config, int64_t default_heads,
                     bool query_latent) {
  const std::string& source = top.source();
  if (query_latent && !config.q_lora_rank) Fail(source, ": ", config.model_type, " needs q_lora_rank (the indexer reads the query latent)");
  config.index_n_heads = top.SizeOr("index_n_heads", default_heads);
  config.index_head_dim = top.SizeOr("index_head_dim", 128);
  config.index_topk = top.SizeOr("index_topk", 2048);
  if (config.index_head_dim < config.qk_rope_head_dim) {
    Fail(source, ": index_head_dim (", config.index_head_dim, ") is smaller than qk_rope_head_dim (",
         config.qk_rope_head_dim, "), which the indexer rotates");
  }
  // Every layer runs its own indexer unless the family says otherwise (GLM IndexShare).
  config.indexer_layers.assign(config.num_hidden_layers, true);
}

void ParseIndexShare(const ConfigReader& top, ModelConfig& config) {
  const int64_t layers = config.num_hidden_layers;
  const std::string& source = top.source();
  config.indexer_layers.clear();
  if (top.Has("indexer_types")) {
    config.indexer_layers = ParseLayerKinds(top, "indexer_types", layers, "shared", "full");
  } else if (top.Has("index_topk_pattern") && top["index_topk_pattern"].is_array()) {
    // transformers' classes take a list as indexer_types itself.
    config.indexer_layers = ParseLayerKinds(top, "index_topk_pattern", layers, "shared", "full");
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

void CheckLinearAttentionDims(const std::string& source, const ModelConfig& config) {
  const int64_t heads = config.linear_num_heads, dim = config.linear_head_dim;
  const int64_t taps = config.linear_conv_kernel;
  if (dim <= 0 || heads <= 0 || taps < 2) {
    Fail(source, ": linear attention needs positive head_dim and num_heads and a kernel of at ",
         "least 2 taps, got ", dim, ", ", heads, ", ", taps);
  }
  if (dim > kMaxLinearSize || heads > kMaxLinearSize || taps > kMaxLinearSize) {
    Fail(source, ": linear attention head_dim (", dim, "), num_heads (", heads,
         ") and conv kernel taps (", taps, ") must each be at most ", kMaxLinearSize,
         ", larger than any model");
  }
}

void ParseHyperStreams(const ConfigReader& top, ModelConfig& config) {
  config.hc_mult = top.IntOr("hc_mult", 4);
  if (config.hc_mult <= 0) Fail(top.source(), ": 'hc_mult' must be positive, got ", config.hc_mult);
  if (config.hc_mult > kMaxHyperStreams) {
    Fail(top.source(), ": 'hc_mult' is ", config.hc_mult, ", more residual streams than any model ",
         "has (at most ", kMaxHyperStreams, ")");
  }
  config.hc_eps = top.NumberOr("hc_eps", 1e-6);
}

namespace {

// Weight dimensions that are products of config sizes, each bounded like a size (see
// CheckDerivedSize), and the routed expert MLPs the loader allocates one by one.
void CheckDerivedSizes(const std::string& source, const ModelConfig& c) {
  int64_t moe_layers = 0;
  for (bool moe : c.moe_layers) moe_layers += moe ? 1 : 0;
  if (SaturatingMul(c.n_routed_experts, std::max<int64_t>(moe_layers, 1)) > kMaxExpertMlps) {
    Fail(source, ": n_routed_experts (", c.n_routed_experts, ") x MoE layers (", moe_layers,
         ") is more expert MLPs than any model has (at most ", kMaxExpertMlps, ")");
  }
  // The query projection's rows (with AXK2's output gate, the largest).
  CheckDerivedSize(
      source, "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim + v_head_dim)",
      SaturatingMul(c.num_attention_heads, SaturatingAdd(c.qk_head_dim(), c.v_head_dim)));
  const int64_t shared = c.shared_expert_intermediate_size > 0 ? c.shared_expert_intermediate_size
                                                               : c.moe_intermediate_size;
  CheckDerivedSize(source, "n_shared_experts x the shared expert intermediate size",
                   SaturatingMul(c.n_shared_experts, shared));
  CheckDerivedSize(source, "index_n_heads x index_head_dim",
                   SaturatingMul(c.index_n_heads, c.index_head_dim));
  // The hyper-connections' gate input: every stream of a token side by side.
  CheckDerivedSize(source, "hc_mult x hidden_size", SaturatingMul(c.hc_mult, c.hidden_size));
}

// A vision-language config (mistral3) holding the text model's config under text_config: that
// config, for a family that reads this wrapper. The wrapper's own tie_word_embeddings decides
// tying, as in transformers (True by default in Mistral3Config). Its quantization_config too:
// save_pretrained writes it at the top level, and transformers reads the text config's only
// when the wrapper states none (the wrapper's wins when both do, so the text config's is then
// not read at all).
ModelConfig FromWrapperJson(const ConfigReader& top) {
  const std::string wrapper = top.StringOr("model_type", "");
  if (!top.Has("text_config") || !top["text_config"].is_object()) {
    Fail(top.source(), ": model_type '", wrapper,
         "' needs a 'text_config' object (the language model)");
  }
  const Json& text = top["text_config"];
  if (text.contains("model_type") && text["model_type"].is_string() &&
      IsWrapperModelType(text["model_type"].get<std::string>())) {
    Fail(top.source(), ": text_config is itself a ", text["model_type"].get<std::string>(),
         " (vision-language) config");
  }
  const bool wrapper_quantized = top.Has("quantization_config");
  Json text_fields = text;
  if (wrapper_quantized) text_fields.erase("quantization_config");
  ModelConfig config = ModelConfig::FromJson(text_fields.dump(), top.source() + " text_config");
  const std::vector<std::string>& wrappers = ArchOf(config).wrapper_model_types;
  if (std::find(wrappers.begin(), wrappers.end(), wrapper) == wrappers.end()) {
    Fail(top.source(), ": a ", wrapper, " checkpoint of a ", config.model_type,
         " language model is not supported");
  }
  config.wrapper_model_type = wrapper;
  config.tie_word_embeddings = top.BoolOr("tie_word_embeddings", true);
  if (wrapper_quantized) ParseQuantization(top, config);
  return config;
}

}  // namespace

ModelConfig ModelConfig::FromJson(const std::string& text, const std::string& source) {
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Json::exception& e) {
    Fail(source, ": invalid JSON: ", e.what());
  }
  if (!json.is_object()) Fail(source, ": not a JSON object");
  ConfigReader top(json, source);

  ModelConfig config;
  if (!top.Has("model_type")) {
    Fail(source, ": missing 'model_type' (supported: ", SupportedModelTypes(), ")");
  }
  config.model_type = top.StringOr("model_type", "");
  if (IsWrapperModelType(config.model_type)) return FromWrapperJson(top);
  const Arch* arch = FindArch(config.model_type);
  if (arch == nullptr) {
    Fail(source, ": unsupported model_type '", config.model_type, "' (supported: ",
         SupportedModelTypes(), ")");
  }
  config.architecture = arch->name;
  const ArchDefaults& d = arch->defaults;
  if (arch->prepare != nullptr) arch->prepare(json, source);

  config.vocab_size = top.PositiveInt("vocab_size");
  config.hidden_size = top.PositiveInt("hidden_size");
  config.intermediate_size = top.PositiveInt("intermediate_size");
  config.num_hidden_layers = top.PositiveInt("num_hidden_layers");
  if (config.num_hidden_layers > kMaxConfigLayers) {
    Fail(source, ": field 'num_hidden_layers' is ", config.num_hidden_layers,
         ", larger than any model (at most ", kMaxConfigLayers, ")");
  }
  // Negative would list none, as transformers' range() does.
  config.num_mtp_layers = std::clamp<int64_t>(
      top.IntOr("num_nextn_predict_layers", top.IntOr("num_mtp_layers", 0)), 0, kMaxConfigLayers);
  config.num_attention_heads = top.PositiveInt("num_attention_heads");
  config.max_position_embeddings = top.IntOr("max_position_embeddings", d.max_position_embeddings);
  if (config.max_position_embeddings <= 0) Fail(source, ": 'max_position_embeddings' must be positive");
  if (config.max_position_embeddings > kMaxConfigSize) {
    Fail(source, ": 'max_position_embeddings' is ", config.max_position_embeddings,
         ", larger than any model (at most ", kMaxConfigSize, ")");
  }
  config.rms_norm_eps = top.NumberOr("rms_norm_eps", d.rms_norm_eps);
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
  config.qk_rope_head_dim = d.rope_dims_may_be_zero && top.Has("qk_rope_head_dim") &&
                                    top["qk_rope_head_dim"] == 0
                                ? 0
                                : top.PositiveInt("qk_rope_head_dim");
  config.v_head_dim = d.v_head_dim_from_heads && !top.Has("v_head_dim")
                          ? config.hidden_size / config.num_attention_heads
                          : top.PositiveInt("v_head_dim");
  if (config.v_head_dim <= 0) Fail(source, ": v_head_dim (hidden_size / num_attention_heads) is 0");
  if (config.qk_rope_head_dim % 2 != 0) {
    Fail(source, ": qk_rope_head_dim (", config.qk_rope_head_dim, ") must be even for rotary pairs");
  }
  // Interleaved (adjacent) rotary pairs unless the family reads otherwise (V3's rope_interleave).
  config.rope_interleave = true;
  ParseRope(top, config);
  ParseMoe(top, d, config);
  ParseLayerTypes(top, config);
  if (arch->parse != nullptr) arch->parse(top, config);
  ParseQuantization(top, config);
  CheckDerivedSizes(source, config);

  config.dtype = top.StringOr("dtype", top.StringOr("torch_dtype", "float32"));
  if (top.Present("bos_token_id")) {
    if (top.Has("bos_token_id")) config.bos_token_id = top.Int("bos_token_id");
    // Checked as eos_token_id is: an id outside the vocabulary names no token (transformers
    // only warns).
    if (config.bos_token_id &&
        (*config.bos_token_id < 0 || *config.bos_token_id >= config.vocab_size)) {
      Fail(source, ": 'bos_token_id' ", *config.bos_token_id, " is not a token id (vocab_size ",
           config.vocab_size, ": ids are 0 to ", config.vocab_size - 1, ")");
    }
  } else {
    config.bos_token_id = d.bos;
  }
  config.eos_token_ids = ParseEos(top, d.eos, config.vocab_size);
  return config;
}

ModelConfig ModelConfig::Load(const std::string& dir) {
  StallWhileMarked(dir);  // test-only: a load that lasts (injected_stall.h)
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  const std::optional<std::string> text = ReadModelFile("model", path, kMaxModelJsonBytes);
  if (!text) Fail(path, ": cannot open (is ", dir, " a Hugging Face checkpoint directory?)");
  return FromJson(*text, path);
}

}  // namespace latent::model
