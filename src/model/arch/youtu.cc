// Youtu-LLM (youtu): DeepSeek V3's MLA (query LoRA, rotary pairs interleaved unless
// rope_interleave is false) in a Llama skeleton: every layer a dense SwiGLU MLP, no experts, and
// the LM head tied to the embedding.
#include "base/dump.h"
#include "base/profile.h"
#include "model/arch/registry.h"
#include "model/deepseek_model.h"

namespace latent::model {
namespace {

// transformers' YoutuConfig defaults (Youtu-LLM-2B).
ArchDefaults Defaults() {
  ArchDefaults d;
  // No experts: a config that states some still parses far enough for Parse to refuse it.
  d.topk_methods = {TopkMethod::kGreedy};
  d.max_position_embeddings = 131072;
  d.bos = 128000;
  d.eos = 128001;
  return d;
}

void Parse(const ConfigReader& top, ModelConfig& config) {
  config.rope_interleave = top.BoolOr("rope_interleave", true);
  // YoutuConfig has no expert fields: a checkpoint that states experts is not a Youtu model.
  if (config.n_routed_experts > 0) {
    Fail(top.source(), ": youtu has no experts, but n_routed_experts is ", config.n_routed_experts);
  }
  // transformers builds a dense MLP in every layer whatever mlp_layer_types says.
  config.moe_layers.assign(config.num_hidden_layers, false);
  // YoutuConfig defaults tie_word_embeddings to true.
  config.tie_word_embeddings = top.BoolOr("tie_word_embeddings", true);
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
    t.DenseMlp(l);
  }
  t.FinalNorm();
  t.LmHead();  // Nothing when tied.
}

// Every layer caches its MLA latent row.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  return cache::ModelCacheRows(c.num_hidden_layers, {MlaLatentRow(c, dtype)});
}

class Youtu final : public DeepseekModel {
 public:
  Youtu(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options) {}

  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override {
    LATENT_PROFILE_SCOPE(kStep);
    Activations a = Start(batch);
    Embed(batch, a.hidden.data());
    for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
      RmsNorm(a.hidden.data(), a.tokens, layer(l).input_norm, a.normed.data());
      MlaAttention(l, batch, a.normed.data(), form, /*dsa=*/nullptr, a.branch.data());
      AddResidual(a.hidden.data(), a.branch.data(), a.tokens);
      RmsNorm(a.hidden.data(), a.tokens, layer(l).post_attention_norm, a.normed.data());
      FeedForward(l, a.normed.data(), a.tokens, a.branch.data(), trace);
      AddResidual(a.hidden.data(), a.branch.data(), a.tokens);
      dump::Tensor("hidden", l, a.hidden.data(), a.tokens, config().hidden_size);
    }
    Head(batch, a.hidden.data(), logits);
  }
};

Arch Make() {
  Arch arch;
  arch.name = "youtu";
  arch.model_types = {"youtu"};
  arch.defaults = Defaults();
  arch.parse = Parse;
  arch.tensors = [](const ModelConfig& c, ExpertLayout layout, const TensorVisitor& visit) {
    ForEachTensor(c, layout, nullptr, visit);
  };
  arch.cache_rows = CacheRows;
  arch.create = [](ModelConfig config, weights::Checkpoint ckpt,
                   const LoadOptions& options) -> std::unique_ptr<Model> {
    return std::make_unique<Youtu>(std::move(config), std::move(ckpt), options);
  };
  return arch;
}

}  // namespace

LATENT_ARCH(50, Make);

}  // namespace latent::model
