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
#include "model/hybrid_kda_model.h"
#include "model/kda_attention.h"

namespace latent::model {
namespace {

// transformers' KimiLinearConfig defaults.
ArchDefaults Defaults() {
  ArchDefaults d;
  d.first_k_dense_replace = 1;
  d.n_group = 1;
  d.topk_group = 1;
  d.n_shared_experts = 0;
  d.routed_scaling_factor = 2.446;
  d.norm_topk_prob = true;
  d.topk_methods = {TopkMethod::kNoauxTc};
  d.scoring = ScoringFunc::kSigmoid;
  d.max_position_embeddings = 1048576;
  d.bos = 163584;
  d.eos = 163586;
  return d;
}

// Kimi's names for the common keys (transformers' attribute_map), read as the DeepSeek ones; a
// file stating both must agree.
void Prepare(Json& json, const std::string& source) {
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
  config.rms_norm_eps = top.NumberOr("rms_norm_eps", 1e-5);
  if (!(config.rms_norm_eps > 0)) Fail(source, ": 'rms_norm_eps' must be positive");
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
  if (config.linear_head_dim <= 0 || config.linear_num_heads <= 0 || config.linear_conv_kernel < 2) {
    Fail(source, ": linear attention needs positive head_dim and num_heads and a kernel of at least 2 taps, got ",
         config.linear_head_dim, ", ", config.linear_num_heads, ", ", config.linear_conv_kernel);
  }
  // The state is heads x head_dim^2 f32 per layer: bounded so that no count of it overflows.
  constexpr int64_t kMaxLinearSize = 4096;  // Kimi Linear 48B: 32 heads of 128, 4 taps
  if (config.linear_head_dim > kMaxLinearSize || config.linear_num_heads > kMaxLinearSize ||
      config.linear_conv_kernel > kMaxLinearSize) {
    Fail(source, ": linear attention head_dim (", config.linear_head_dim, "), num_heads (",
         config.linear_num_heads, ") and short_conv_kernel_size (", config.linear_conv_kernel,
         ") must each be at most ", kMaxLinearSize, ", larger than any model");
  }
  config.linear_attention_layers = ParseLayerTypes(top, linear, config.num_hidden_layers);
}

// Kimi's MoE under block_sparse_moe: router (+ correction bias), experts.E.w1 (gate) / w2 (down)
// / w3 (up), shared experts with DeepSeek's names.
class Tensors {
 public:
  Tensors(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w, const TensorVisitor& visit)
      : c_(c), w_(w), visit_(visit), t_(c, layout, w, visit) {}

  void All() {
    t_.Embedding();
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      t_.InputNorm(l);
      c_.IsLinearAttentionLayer(l) ? Kda(l) : t_.MlaAttention(l);
      t_.PostAttentionNorm(l);
      const std::string p = StrCat("model.layers.", l, ".block_sparse_moe.");
      c_.IsMoeLayer(l) ? Moe(l, p) : t_.DenseMlpAt(l, p);
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
    // expert_: the routed expert being listed, so expert parallelism (ExpertShard) splits them.
    visit_(ExpectedWeight{std::move(name), std::move(shape), kind, rule, target,
                          Presence::kRequired, expert_});
  }
  void Linear(const std::string& name, Shape shape, kernels::WeightRef* target) {
    Add(name, std::move(shape), WeightKind::kLinear, QuantizeRule::kWeightsAndActivations, To(target));
  }
  // Small f32 parameters (convolution taps, gate constants), kept as stored like a router.
  void F32(const std::string& name, Shape shape, std::vector<float>* target) {
    Add(name, std::move(shape), WeightKind::kRouter, QuantizeRule::kKeep, To(target));
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
    F32(a + "A_log", {1, 1, h, 1}, k ? &k->forget.a_log : nullptr);
    F32(a + "dt_bias", {ch}, k ? &k->forget.dt_bias : nullptr);
    Linear(a + "f_a_proj.weight", {dk, d}, k ? &k->forget.f_a : nullptr);
    Linear(a + "f_b_proj.weight", {ch, dk}, k ? &k->forget.f_b : nullptr);
    Linear(a + "b_proj.weight", {h, d}, k ? &k->b : nullptr);
    Linear(a + "g_a_proj.weight", {dk, d}, k ? &k->g_a : nullptr);
    Linear(a + "g_b_proj.weight", {ch, dk}, k ? &k->g_b : nullptr);
    Add(a + "o_norm.weight", {dk}, WeightKind::kNorm, QuantizeRule::kKeep, To(k ? &k->o_norm : nullptr));
    Linear(a + "o_proj.weight", {d, ch}, k ? &k->o : nullptr);
  }

  void Mlp(const std::string& p, const char* gate, const char* up, const char* down, int64_t inter,
           ops::MlpWeights* w) {
    const int64_t d = c_.hidden_size;
    Linear(p + gate + ".weight", {inter, d}, w ? &w->gate : nullptr);
    Linear(p + down + ".weight", {d, inter}, w ? &w->down : nullptr);
    Linear(p + up + ".weight", {inter, d}, w ? &w->up : nullptr);
  }

  void Moe(int64_t l, const std::string& p) {
    const int64_t e = c_.n_routed_experts, i = c_.moe_intermediate_size;
    MoeWeights* m = Layer(l) ? &Layer(l)->moe.emplace() : nullptr;
    if (m != nullptr) m->experts.resize(e);
    Add(p + "gate.weight", {e, c_.hidden_size}, WeightKind::kRouter, QuantizeRule::kKeep,
        To(m ? &m->router : nullptr));
    if (c_.topk_method == TopkMethod::kNoauxTc) {
      Add(p + "gate.e_score_correction_bias", {e}, WeightKind::kBuffer, QuantizeRule::kKeep,
          To(m ? &m->bias : nullptr));
    }
    for (int64_t x = 0; x < e; ++x) {
      expert_ = x;
      Mlp(StrCat(p, "experts.", x, "."), "w1", "w3", "w2", i, m ? &m->experts[x] : nullptr);
    }
    expert_ = -1;
    if (c_.n_shared_experts > 0) {
      Mlp(p + "shared_experts.", "gate_proj", "up_proj", "down_proj", i * c_.n_shared_experts,
          m ? &m->shared.emplace() : nullptr);
    }
  }

  const ModelConfig& c_;
  DeepseekWeights* w_;
  const TensorVisitor& visit_;
  DeepseekTensors t_;
  int64_t expert_ = -1;
};

void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w, const TensorVisitor& visit) {
  Tensors(c, layout, w, visit).All();
}

// MLA layers cache their latent row (rope part unrotated); KDA layers keep per-sequence state.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  cache::ModelCacheRows rows(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.IsLinearAttentionLayer(l)) {
      rows[l] = KdaStateRows(c);
    } else {
      rows[l].push_back(MlaLatentRow(c, dtype));
    }
  }
  return rows;
}

class KimiLinear final : public HybridKdaModel {
 public:
  KimiLinear(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : HybridKdaModel(std::move(config), std::move(ckpt), ForEachTensor, options,
                       KdaForgetGateKind::kKimi) {
    DisableRotation();
  }
};

Arch Make() {
  Arch arch;
  arch.name = "kimi_linear";
  arch.model_types = {"kimi_linear"};
  arch.defaults = Defaults();
  arch.prepare = Prepare;
  arch.parse = Parse;
  arch.tensors = [](const ModelConfig& c, ExpertLayout layout, const TensorVisitor& visit) {
    ForEachTensor(c, layout, nullptr, visit);
  };
  arch.cache_rows = CacheRows;
  arch.create = [](ModelConfig config, weights::Checkpoint ckpt,
                   const LoadOptions& options) -> std::unique_ptr<Model> {
    return std::make_unique<KimiLinear>(std::move(config), std::move(ckpt), options);
  };
  return arch;
}

}  // namespace

LATENT_ARCH(170, Make);

}  // namespace latent::model
