// Kimi Linear (kimi_linear): a hybrid of KDA linear-attention layers (model/kda_attention.h) and
// MLA layers, three KDA layers per MLA layer in the 48B model, with DeepSeek V3's MoE.
//  - MLA layers are NoPE but keep the rotary part of the heads and of the latent: the k_pe part
//    of the cached row is stored unrotated and q_pe is not rotated (every rotation is the
//    identity, DeepseekModel::DisableRotation); no query LoRA in the released model.
//  - Which layers are which: layer_types, else linear_attn_config's 1-indexed full_attn_layers
//    and kda_layers, else transformers' default (full attention at i % 4 == 0, i > 0).
//  - Config keys under Kimi's names (num_experts, num_experts_per_token, moe_renormalize,
//    num_expert_group, num_shared_experts, model_max_length), read as their DeepSeek ones.
//  - Tensors under the checkpoint's names (what transformers writes and reads for this class):
//    self_attn.{q,k,v}_proj, {q,k,v}_conv1d, A_log, dt_bias, f_a_proj, f_b_proj, b_proj,
//    g_a_proj, g_b_proj, o_norm, o_proj on KDA layers; block_sparse_moe.{gate_proj, up_proj,
//    down_proj} on dense layers; block_sparse_moe.{gate, experts.E.w1/w2/w3, shared_experts} on
//    MoE layers.
// KDA layers keep per-sequence state (kda.conv, kda.state, kda.block rows), so the engine gives
// each running sequence a state slot and refuses prefix-cache hits on this family.
#include <cmath>

#include "model/arch/registry.h"
#include "model/deepseek_model.h"
#include "model/kda_attention.h"

namespace latent::model {
namespace {

// transformers' KimiLinearConfig defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 1,
          // Read only to derive mlp_layer_types.
          .null_first_dense = NullFirstDense::kFailsWithoutLayerTypes,
          .n_group = 1, .topk_group = 1, .n_shared_experts = 1,
          .routed_scaling_factor = 2.446, .norm_topk_prob = true,
          .topk_methods = {TopkMethod::kNoauxTc}, .scoring = ScoringFunc::kSigmoid,
          .max_position_embeddings = 1048576, .rms_norm_eps = 1e-5, .bos = 163584, .eos = 163586};
}

// Kimi's names for the common keys (transformers' attribute_map), read as the DeepSeek ones; a
// file stating both must agree.
void Prepare(Json& json, const std::string& source) {
  ReadMoeKeyAliases(json, source);
  if (!json.contains("q_lora_rank")) json["q_lora_rank"] = nullptr;  // the class default
}

// Per layer: true for a KDA layer.
std::vector<bool> ParseLayerTypes(const ConfigReader& top, const Json* linear, int64_t layers) {
  const std::string& source = top.source();
  std::vector<bool> kda(layers, false);
  if (top.Has("layer_types")) {
    const Json& v = top["layer_types"];
    if (!v.is_array() || static_cast<int64_t>(v.size()) != layers) {
      Fail(source, ": 'layer_types' must list one type for each of the ", layers, " layers");
    }
    for (int64_t l = 0; l < layers; ++l) {
      const std::string type = v[l].is_string() ? v[l].get<std::string>() : v[l].dump();
      if (type != "linear_attention" && type != "full_attention") {
        Fail(source, ": 'layer_types' entry ", l, " must be \"linear_attention\" or \"full_attention\", got ", type);
      }
      kda[l] = type == "linear_attention";
    }
    return kda;
  }
  if (linear != nullptr && linear->contains("full_attn_layers") && linear->contains("kda_layers")) {
    std::vector<int> kind(layers, -1);  // 0 full, 1 KDA
    for (const char* key : {"full_attn_layers", "kda_layers"}) {
      const Json& list = (*linear)[key];
      if (!list.is_array()) Fail(source, ": linear_attn_config '", key, "' must be a list of layer numbers");
      for (const Json& entry : list) {
        // 1-indexed, as the checkpoint writes them.
        if (!entry.is_number_integer() || entry.get<int64_t>() < 1 || entry.get<int64_t>() > layers) {
          Fail(source, ": linear_attn_config '", key, "' entry ", entry.dump(), " is not a layer in 1..", layers);
        }
        int& k = kind[entry.get<int64_t>() - 1];
        if (k != -1) Fail(source, ": layer ", entry.get<int64_t>(), " is listed twice in linear_attn_config");
        k = std::string(key) == "kda_layers" ? 1 : 0;
      }
    }
    for (int64_t l = 0; l < layers; ++l) {
      if (kind[l] == -1) {
        Fail(source, ": layer ", l + 1, " is in neither full_attn_layers nor kda_layers");
      }
      kda[l] = kind[l] == 1;
    }
    return kda;
  }
  for (int64_t l = 0; l < layers; ++l) kda[l] = !(l > 0 && l % 4 == 0);
  return kda;
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  if (config.hidden_act != "silu") Fail(source, ": kimi_linear needs hidden_act silu, got ", config.hidden_act);
  const Json* linear = nullptr;
  if (top.Has("linear_attn_config")) {
    if (!top["linear_attn_config"].is_object()) Fail(source, ": 'linear_attn_config' must be an object");
    linear = &top["linear_attn_config"];
  }
  // linear_attn_config wins over the top-level fields, as in transformers.
  config.linear_head_dim = top.IntOr("linear_head_dim", 128);
  config.linear_num_heads = top.IntOr("linear_num_heads", 32);
  config.linear_conv_kernel = top.IntOr("linear_conv_kernel_dim", 4);
  if (linear != nullptr) {
    const ConfigReader l(*linear, source + " linear_attn_config");
    config.linear_head_dim = l.IntOr("head_dim", config.linear_head_dim);
    config.linear_num_heads = l.IntOr("num_heads", config.linear_num_heads);
    config.linear_conv_kernel = l.IntOr("short_conv_kernel_size", config.linear_conv_kernel);
  }
  CheckLinearAttentionDims(source, config);
  config.linear_attention_layers = ParseLayerTypes(top, linear, config.num_hidden_layers);
}

// KDA layers under self_attn (A_log stored [1, 1, H, 1]); Kimi's MLPs under block_sparse_moe:
// router (+ correction bias), experts.E.w1 (gate) / w3 (up) / w2 (down), shared experts with
// DeepSeek's names.
void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w, const TensorVisitor& visit) {
  DeepseekTensors t(c, layout, w, visit);
  t.Embedding();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = StrCat("model.layers.", l, ".");
    t.InputNorm(l);
    if (c.IsLinearAttentionLayer(l)) {
      t.KdaAttentionAt(l, p + "self_attn.", {1, 1, c.linear_num_heads, 1});
    } else {
      t.MlaAttention(l);
    }
    t.PostAttentionNorm(l);
    if (c.IsMoeLayer(l)) {
      t.MoeAt(l, p + "block_sparse_moe.", {.gate = "w1", .up = "w3", .down = "w2"});
    } else {
      t.DenseMlpAt(l, p + "block_sparse_moe.");
    }
  }
  t.FinalNorm();
  t.LmHead();
}

// Its Forward is DeepseekModel's plain pre-norm decoder, KDA on the linear-attention layers.
class KimiLinear final : public DeepseekModel {
 public:
  KimiLinear(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options) {
    EnableKda(KdaForgetGateKind::kKimi);
    DisableRotation();
  }
};

Arch Make() {
  return WithModel<KimiLinear, ForEachTensor>(
      {.name = "kimi_linear", .model_types = {"kimi_linear"}, .defaults = Defaults(),
       .prepare = Prepare, .parse = Parse, .cache_rows = KdaHybridRows});
}

}  // namespace

LATENT_ARCH(170, Make);

}  // namespace latent::model
