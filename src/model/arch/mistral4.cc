// Mistral Small 4 (mistral4): DeepSeek V3's MLA with YaRN on the rotary part of head_dim
// (partial_rotary_factor = rope / (nope + rope)), Llama-4 query scaling
// (q *= 1 + beta * ln(1 + floor(position / L0)) after rope), and in every layer a MoE whose
// router takes softmax scores, keeps the topk_group groups with the best top-2 sums and picks the
// k best there (weights from the unmasked scores). Released checkpoints wrap it in a Mistral 3
// vision-language config (model_type mistral3, text_config, language_model.* tensors): latent
// reads the language model and ignores the vision tower.
#include <cmath>

#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

// transformers' Mistral4Config defaults.
ArchDefaults Defaults() {
  return {.first_k_dense_replace = 0, .n_group = 1, .topk_group = 1, .n_shared_experts = 1,
          .routed_scaling_factor = 1.0, .norm_topk_prob = true,
          .topk_methods = {TopkMethod::kGroupTop2}, .scoring = ScoringFunc::kSoftmax,
          .max_position_embeddings = 1048576, .rms_norm_eps = 1e-6, .bos = 1, .eos = 2};
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  const std::string& source = top.source();
  config.rope_interleave = top.BoolOr("rope_interleave", true);
  const char* key = top.Has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (!top.Has(key) || !top[key].is_object()) {
    Fail(source, ": mistral4 needs 'rope_parameters' (with llama_4_scaling_beta and "
         "original_max_position_embeddings)");
  }
  const ConfigReader rope(top[key], source + " " + key);
  // Mistral4Attention reads both unconditionally.
  if (!rope.Has("llama_4_scaling_beta")) Fail(rope.source(), ": missing 'llama_4_scaling_beta'");
  config.llama_4_scaling_beta = rope.NumberOr("llama_4_scaling_beta", 0.0);
  config.llama_4_scaling_positions = rope.IntOr("original_max_position_embeddings", 0);
  if (config.llama_4_scaling_positions <= 0) {
    Fail(rope.source(), ": 'original_max_position_embeddings' must be given and positive");
  }
  // transformers rotates int(head_dim * partial_rotary_factor) dims, head_dim = nope + rope;
  // latent rotates the rope part of each head, so the two must agree.
  const int64_t head_dim = config.qk_head_dim();
  const double factor =
      rope.NumberOr("partial_rotary_factor",
                    static_cast<double>(config.qk_rope_head_dim) / static_cast<double>(head_dim));
  const auto rotary = static_cast<int64_t>(static_cast<double>(head_dim) * factor);
  if (rotary != config.qk_rope_head_dim) {
    Fail(rope.source(), ": partial_rotary_factor ", factor, " rotates ", rotary, " of head_dim ",
         head_dim, ", but qk_rope_head_dim is ", config.qk_rope_head_dim);
  }
  if (config.n_routed_experts > 0 && config.n_routed_experts / config.n_group < 2) {
    // Groups are ranked by the sum of their two best experts.
    Fail(source, ": mistral4 needs at least 2 experts per group, got ",
         config.n_routed_experts / config.n_group);
  }
}

// Every tensor, in checkpoint order; with `w`, where each one loads.
void ForEachTensor(const ModelConfig& c, ExpertLayout layout, DeepseekWeights* w,
                   const TensorVisitor& visit) {
  DeepseekTensors t(c, layout, w, visit);
  t.Embedding();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    t.InputNorm(l);
    t.MlaAttention(l);
    t.PostAttentionNorm(l);
    c.IsMoeLayer(l) ? t.Moe(l) : t.DenseMlp(l);
  }
  t.FinalNorm();
  t.LmHead();
}

// Every layer caches its MLA latent row.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  return cache::ModelCacheRows(c.num_hidden_layers, {MlaLatentRow(c, dtype)});
}

class Mistral4 final : public DeepseekModel {
 public:
  Mistral4(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options) {}

  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override {
    LATENT_PROFILE_SCOPE(kStep);
    Activations a = Start(batch);
    const std::vector<float> query_scale = QueryScale(batch);  // [T]
    Embed(batch, a.hidden);
    for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
      ResidualLayer(l, batch, form, a, /*dsa=*/nullptr, trace, query_scale.data());
    }
    Head(batch, a.hidden, logits);
  }

 private:
  // 1 + beta * ln(1 + floor(position / L0)) per token, in f32 as transformers computes it
  // (ministral3's get_llama_4_attn_scale).
  std::vector<float> QueryScale(const ForwardBatch& batch) const {
    const float beta = static_cast<float>(config().llama_4_scaling_beta);
    const float positions = static_cast<float>(config().llama_4_scaling_positions);
    std::vector<float> scale(batch.positions.size());
    for (size_t t = 0; t < scale.size(); ++t) {
      const float p = static_cast<float>(batch.positions[t]);
      scale[t] = 1.0f + beta * std::log(1.0f + std::floor(p / positions));
    }
    return scale;
  }
};

Arch Make() {
  return WithModel<Mistral4, ForEachTensor>(
      {.name = "mistral4", .model_types = {"mistral4"}, .defaults = Defaults(),
       .wrapper_model_types = {"mistral3"}, .prepare = IgnoreMlpLayerTypes, .parse = Parse,
       .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(64, Make);

}  // namespace latent::model
