// ConfigReader: typed fields of one config.json object, naming the file and the field in every
// error. The generic parser (model_config.cc) and the family hooks (arch/) read through it.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/model_config.h"

namespace latent::model {

using Json = nlohmann::json;

// Bounds on sizes in config.json, far above any real model's (DeepSeek V3: 61 layers, hidden
// 7168, vocabulary 129,280).
constexpr int64_t kMaxConfigSize = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxConfigLayers = 1 << 16;
// Routed expert MLPs (n_routed_experts x MoE layers) a config may imply: far above any model's
// (Kimi K2: 384 x 60 = 23,040), low enough that listing and holding their tensors is cheap.
constexpr int64_t kMaxExpertMlps = int64_t{1} << 20;
// Linear attention's heads, head dim and convolution taps, each: far above any model's (Kimi
// Linear 48B: 32 heads of 128, 4 taps; GLM-5-Next: 64 heads), low enough that the state (heads x
// head_dim^2 f32 per layer) and every product of them with a size fits in int64.
constexpr int64_t kMaxLinearSize = 4096;
// Hyper-connection residual streams (hc_mult): Hy4 and GLM-5-Next use 4; each stream is a copy
// of the hidden state per token, and the gates grow as hc_mult^2.
constexpr int64_t kMaxHyperStreams = 64;

// Reads typed fields from one JSON object and names `source` and the field in every error.
class ConfigReader {
 public:
  ConfigReader(const Json& object, std::string source)
      : object_(object), source_(std::move(source)) {}

  bool Has(const char* key) const { return object_.contains(key) && !object_[key].is_null(); }
  bool Present(const char* key) const { return object_.contains(key); }

  int64_t RequiredInt(const char* key) const {
    if (!Has(key)) Fail(source_, ": missing required field '", key, "'");
    return Int(key);
  }
  // A size: positive, and at most kMaxConfigSize, so that no product of two sizes (a weight's
  // element count) overflows and no per-size allocation is absurd.
  int64_t PositiveInt(const char* key) const { return CheckSize(key, RequiredInt(key), 1); }
  // An optional size: `fallback` when absent, else at least `min` (0 or 1) and at most
  // kMaxConfigSize, as PositiveInt.
  int64_t SizeOr(const char* key, int64_t fallback, int64_t min = 1) const {
    return Has(key) ? CheckSize(key, Int(key), min) : fallback;
  }
  int64_t IntOr(const char* key, int64_t fallback) const { return Has(key) ? Int(key) : fallback; }
  // A number that must be positive and finite (rope_theta: zero or less makes NaN frequencies).
  double PositiveNumberOr(const char* key, double fallback) const {
    const double v = NumberOr(key, fallback);
    if (!(v > 0) || !std::isfinite(v)) {
      Fail(source_, ": field '", key, "' must be positive and finite, got ", object_[key].dump());
    }
    return v;
  }
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
  int64_t CheckSize(const char* key, int64_t v, int64_t min) const {
    if (v < min) {
      Fail(source_, ": field '", key, "' must be ", min > 0 ? "positive" : "non-negative",
           ", got ", v);
    }
    if (v > kMaxConfigSize) {
      Fail(source_, ": field '", key, "' is ", v, ", larger than any model (at most ",
           kMaxConfigSize, ")");
    }
    return v;
  }

  const Json& object_;
  std::string source_;
};

// Fails unless `size`, a weight dimension derived from config sizes (`what` says how), is at
// most kMaxConfigSize: each dimension then is a size itself, so no dimension and no product of
// two overflows. Compute `size` with SaturatingMul / SaturatingAdd.
void CheckDerivedSize(const std::string& source, const std::string& what, int64_t size);

// The eos_token_id field of `file` (config.json or generation_config.json): an integer, a list
// of them, or null (none). Every id must name a token: 0 <= id < vocab_size.
std::vector<int64_t> ParseEosTokenIds(const Json& value, const std::string& file,
                                      int64_t vocab_size);

// Kimi's and Ling's names for DeepSeek's MoE keys (num_experts, num_local_experts,
// num_experts_per_token, moe_renormalize, num_expert_group, num_shared_experts) and
// model_max_length, read as the common ones the way transformers' attribute_map does; a file
// stating both must agree. For a family's Arch::prepare.
void ReadMoeKeyAliases(Json& json, const std::string& source);

// An Arch::prepare for the families whose transformers classes never read mlp_layer_types
// (DeepSeek V2/V3 and Mistral 4 take MoE from first_k_dense_replace on, LongCat Flash has its
// MoE in every layer, MiniCPM3 and Youtu a dense MLP in every layer): drops a stated list, so
// that the layer kinds come from the family's own fields as in transformers.
void IgnoreMlpLayerTypes(Json& json, const std::string& source);

// How a family's configuration class reads moe_layer_freq: a number (every k-th layer is MoE),
// or also a per-layer list of truthy entries (Dots3NoteTextConfig).
enum class MoeLayerFreq { kNumber, kNumberOrList };

// The legacy layer kinds of AXK1Config, AXK2Config and Dots3NoteTextConfig, for a family's
// Arch::prepare: without mlp_layer_types, layer l is "sparse" when l >= first_k_dense_replace
// (default `default_first_dense`) and l % moe_layer_freq == 0 (or moe_layer_freq[l], a list,
// is truthy), written as mlp_layer_types; a stated null for either key is refused, as
// transformers fails on it. Beside an explicit list moe_layer_freq is ignored. Either way
// moe_layer_freq is then dropped: the common parser never reads it, as the other families'
// classes ignore it.
void DeriveMlpLayerTypes(Json& json, const std::string& source, int64_t default_first_dense,
                         MoeLayerFreq form = MoeLayerFreq::kNumber);

// The linear-attention dims a hybrid family read into `config` (linear_num_heads,
// linear_head_dim, linear_conv_kernel): positive, at least 2 taps, each at most kMaxLinearSize.
void CheckLinearAttentionDims(const std::string& source, const ModelConfig& config);

// hc_mult (default 4, 1 to kMaxHyperStreams) and hc_eps of a family with hyper-connections.
void ParseHyperStreams(const ConfigReader& top, ModelConfig& config);

// Per-layer list of `no` / `yes` strings -> bools (true for `yes`), one entry per layer.
std::vector<bool> ParseLayerKinds(const ConfigReader& top, const char* key, int64_t layers,
                                  const char* no, const char* yes);

// The DeepSeek sparse attention keys (index_n_heads, index_head_dim, index_topk) of a family with
// an indexer; every layer runs its own unless the family then says otherwise (GLM IndexShare).
// `query_latent`: the indexer's queries read the query latent (q_lora_rank required); else the
// family feeds them from the hidden state (mistral_large4).
void ParseDsaIndexer(const ConfigReader& top, ModelConfig& config, int64_t default_heads,
                     bool query_latent = true);
// layer_types of a family whose every layer is DSA attention (deepseek_v32, glm_moe_dsa, axk2,
// mistral_large4, hy_v4): when stated, one "indexed_attention" per layer. transformers refuses
// another length; another type would say the layer runs an attention the family does not have.
void ParseIndexedLayerTypes(const ConfigReader& top, const ModelConfig& config);
// IndexShare (GLM-5, mistral_large4): which layers run their own indexer ("full") and which
// reuse the selection of the last one that did ("shared"), from indexer_types, else
// index_topk_pattern ("FSS...", or a list read as indexer_types), else index_topk_freq /
// index_skip_topk_offset, as transformers derives them. Layer 0 must be full.
void ParseIndexShare(const ConfigReader& top, ModelConfig& config);

}  // namespace latent::model
