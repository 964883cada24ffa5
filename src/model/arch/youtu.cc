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
  // No experts: a config that states some still parses far enough for Parse to refuse it.
  return {.null_first_dense = NullFirstDense::kIgnored,  // every layer dense
          .topk_methods = {TopkMethod::kGreedy}, .max_position_embeddings = 131072,
          .rms_norm_eps = 1e-6, .bos = 128000, .eos = 128001};
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
  t.LmHead();  // When tied, only a head the checkpoint stores.
}

// Every layer caches its MLA latent row.
cache::ModelCacheRows CacheRows(const ModelConfig& c, CacheDType dtype) {
  return cache::ModelCacheRows(c.num_hidden_layers, {MlaLatentRow(c, dtype)});
}

// Its Forward is DeepseekModel\'s plain pre-norm decoder.
class Youtu final : public DeepseekModel {
 public:
  Youtu(ModelConfig config, weights::Checkpoint ckpt, const LoadOptions& options)
      : DeepseekModel(std::move(config), std::move(ckpt), ForEachTensor, options) {}
};

Arch Make() {
  return WithModel<Youtu, ForEachTensor>(
      {.name = "youtu", .model_types = {"youtu"}, .defaults = Defaults(),
       .prepare = IgnoreMlpLayerTypes, .parse = Parse,
       .cache_rows = CacheRows});
}

}  // namespace

LATENT_ARCH(50, Make);

}  // namespace latent::model
