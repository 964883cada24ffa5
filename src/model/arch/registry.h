// The model families latent runs, keyed by config.json's model_type. Each family is one arch file
// (arch/<family>.cc) that registers itself with LATENT_ARCH(order, MakeFn), the way CLI commands
// register with LATENT_COMMAND: nothing outside arch/ switches on the family. The supported
// model_types, the config quirks, the tensor list, the cache rows and the forward pass of a family
// all come from its Arch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_row_spec.h"
#include "model/cache_rows.h"
#include "model/config_reader.h"
#include "model/load_options.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/weight_table.h"
#include "weights/checkpoint.h"

namespace latent::model {

// What a family's transformers class makes of `"first_k_dense_replace": null`: it fails (a
// strictly typed int field, or one its decoder layers compare with the layer index: TypeError),
// fails only where it derives mlp_layer_types from it (none stated), or never reads it.
enum class NullFirstDense { kFails, kFailsWithoutLayerTypes, kIgnored };

// transformers' class defaults of a family, used when config.json omits a non-dimension field,
// so that latent reads a checkpoint exactly as transformers does.
struct ArchDefaults {
  int64_t first_k_dense_replace = 0;
  // A stated null is refused where the class fails on it (model_config.cc's ParseMoe); where it
  // does not, it is read as absent (the default above).
  NullFirstDense null_first_dense = NullFirstDense::kFails;
  std::optional<int64_t> n_group{}, topk_group{};  // nullopt: required by grouped routers
  int64_t n_shared_experts = 0;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = false;
  std::vector<TopkMethod> topk_methods{};  // The ones it routes with; the first is the default.
  ScoringFunc scoring = ScoringFunc::kSoftmax;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  std::optional<int64_t> bos{}, eos{};
  // v_head_dim may be omitted, meaning hidden_size / num_attention_heads (MiniCPM3).
  bool v_head_dim_from_heads = false;
  // qk_rope_head_dim may be 0: no rotary part anywhere (GLM-5-Next's MLA is all NoPE).
  bool rope_dims_may_be_zero = false;
};

struct Arch {
  std::string name{};                      // The family: "deepseek_v3"
  std::vector<std::string> model_types{};  // The model_types it reads: {"deepseek_v3", "kimi_k2"}
  // The tool-call markup its model_types write, as {model_type, parser name} (the names of
  // `latent serve --tool-call-parser`, server/tool_call_parser.h): what `--tool-call-parser auto`
  // picks when the chat template does not show the markup. A model_type not listed: none.
  std::vector<std::pair<std::string, std::string>> tool_call_formats{};
  ArchDefaults defaults{};
  // Vision-language model_types whose config.json holds this family's config under text_config
  // ({"mistral3"} for mistral4); their vision tower is not loaded.
  std::vector<std::string> wrapper_model_types{};
  // Rewrites config.json before the common keys are read (a family's names for them, such as
  // LongCat's num_layers and ffn_hidden_size). May be null.
  void (*prepare)(Json& config_json, const std::string& source) = nullptr;
  // Reads and checks the family's own keys, after the common ones (model_config.cc). May be null.
  void (*parse)(const ConfigReader& top, ModelConfig& config) = nullptr;
  // Visits every tensor of a checkpoint of `config`, in checkpoint order (no targets).
  void (*tensors)(const ModelConfig& config, ExpertLayout layout, const TensorVisitor& visit) = nullptr;
  // The rows each layer caches per token, stored as `dtype`.
  cache::ModelCacheRows (*cache_rows)(const ModelConfig& config, CacheDType dtype) = nullptr;
  // Builds the model over a validated config and its checkpoint.
  std::unique_ptr<Model> (*create)(ModelConfig config, weights::Checkpoint ckpt,
                                   const LoadOptions& options) = nullptr;
};

// Registered families, in their registration order.
const std::vector<Arch>& Archs();
// The family that reads `model_type`, or null.
const Arch* FindArch(const std::string& model_type);
// Whether some family reads configs of `model_type` under their text_config (mistral3).
bool IsWrapperModelType(const std::string& model_type);
// The family of a parsed config (config.architecture).
const Arch& ArchOf(const ModelConfig& config);
// The tool-call parser name the family of `model_type` declares for it (Arch::tool_call_formats),
// or "" (none declared, or no family reads `model_type`).
std::string ToolCallFormatFor(const std::string& model_type);

// `arch` with its `tensors` and `create` filled in from the family's tensor list
// (kForEachTensor(config, layout, weights or null, visit)) and its model class (constructed from
// the config, the checkpoint and the options): the two entries every arch file would spell alike.
template <class FamilyModel, auto kForEachTensor>
Arch WithModel(Arch arch) {
  arch.tensors = [](const ModelConfig& c, ExpertLayout layout, const TensorVisitor& visit) {
    kForEachTensor(c, layout, nullptr, visit);
  };
  arch.create = [](ModelConfig config, weights::Checkpoint ckpt,
                   const LoadOptions& options) -> std::unique_ptr<Model> {
    return std::make_unique<FamilyModel>(std::move(config), std::move(ckpt), options);
  };
  return arch;
}

struct ArchRegistration {
  ArchRegistration(int order, Arch (*make)());
};

}  // namespace latent::model

// LATENT_ARCH(order, MakeFn): registers MakeFn()'s Arch; `order` fixes the supported list's order.
#define LATENT_ARCH(order, make) \
  static const ::latent::model::ArchRegistration arch_registration_##make(order, make)
