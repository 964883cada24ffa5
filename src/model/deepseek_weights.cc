#include "model/deepseek_weights.h"

#include "base/error.h"
#include "kernels/kernel_table.h"
#include "model/weight_table.h"

namespace latent::model {
namespace {

class Loader {
 public:
  Loader(const ModelConfig& config, const weights::Checkpoint& ckpt) : config_(config), ckpt_(ckpt) {}

  kernels::WeightRef Linear(const std::string& name) const {
    TensorView t = ckpt_.Get(name);
    kernels::WeightRef w;
    w.data = t.data;
    w.dtype = t.dtype;
    w.n = t.shape[0];
    w.k = t.shape[1];
    if (t.dtype == DType::kF8E4M3) {
      TensorView s = ckpt_.Get(name + "_scale_inv");
      w.scale = s.data;
      w.scale_dtype = s.dtype;
      w.block_n = config_.quantization.block_n;
      w.block_k = config_.quantization.block_k;
    }
    return w;
  }

  // Expert e of a fused [E, out, in] tensor, rows [row, row + rows) of it.
  kernels::WeightRef FusedExpert(const std::string& name, int64_t e, int64_t row, int64_t rows) const {
    TensorView t = ckpt_.Get(name);
    if (t.dtype == DType::kF8E4M3) Fail(ckpt_.dir(), ": fp8 fused experts ('", name, "') are not supported");
    kernels::WeightRef w;
    w.dtype = t.dtype;
    w.n = rows;
    w.k = t.shape[2];
    w.data = t.bytes() + ((e * t.shape[1] + row) * t.shape[2]) * DTypeSize(t.dtype);
    return w;
  }

  NormWeight Norm(const std::string& name) const {
    TensorView t = ckpt_.Get(name);
    return {t.data, t.dtype};
  }

  std::vector<float> ToF32(const std::string& name) const {
    kernels::WeightRef w;
    TensorView t = ckpt_.Get(name);
    w.data = t.data;
    w.dtype = t.dtype;
    w.n = t.shape.rank() == 2 ? t.shape[0] : 1;
    w.k = t.shape.rank() == 2 ? t.shape[1] : t.shape[0];
    std::vector<float> out(w.n * w.k);
    for (int64_t r = 0; r < w.n; ++r) kernels::RefKernels().dequant_row(w, r, out.data() + r * w.k);
    return out;
  }

  MlpWeights Mlp(const std::string& prefix) const {
    return {Linear(prefix + "gate_proj.weight"), Linear(prefix + "up_proj.weight"),
            Linear(prefix + "down_proj.weight")};
  }

 private:
  const ModelConfig& config_;
  const weights::Checkpoint& ckpt_;
};

}  // namespace

DeepseekWeights LoadDeepseekWeights(const ModelConfig& config, const weights::Checkpoint& ckpt) {
  const CheckpointReport report = ValidateCheckpoint(config, ckpt);
  const Loader load(config, ckpt);
  DeepseekWeights w;
  w.embed = load.Linear("model.embed_tokens.weight");
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const std::string p = StrCat("model.layers.", l, ".");
    LayerWeights& layer = w.layers.emplace_back();
    layer.input_norm = load.Norm(p + "input_layernorm.weight");
    layer.post_attention_norm = load.Norm(p + "post_attention_layernorm.weight");
    AttentionWeights& a = layer.attention;
    const std::string s = p + "self_attn.";
    if (config.q_lora_rank) {
      a.q_a = load.Linear(s + "q_a_proj.weight");
      a.q_a_norm = load.Norm(s + "q_a_layernorm.weight");
      a.q_b = load.Linear(s + "q_b_proj.weight");
    } else {
      a.q_proj = load.Linear(s + "q_proj.weight");
    }
    a.kv_a = load.Linear(s + "kv_a_proj_with_mqa.weight");
    a.kv_a_norm = load.Norm(s + "kv_a_layernorm.weight");
    a.kv_b = load.Linear(s + "kv_b_proj.weight");
    a.o = load.Linear(s + "o_proj.weight");
    if (config.HasIndexer(l)) {
      IndexerWeights& ix = layer.indexer.emplace();
      const std::string x = s + "indexer.";
      ix.wq_b = load.Linear(x + "wq_b.weight");
      ix.wk = load.Linear(x + "wk.weight");
      ix.k_norm = load.Norm(x + "k_norm.weight");
      ix.k_norm_bias = load.Norm(x + "k_norm.bias");
      ix.weights_proj = load.ToF32(x + "weights_proj.weight");
    }

    if (!config.IsMoeLayer(l)) {
      layer.dense = load.Mlp(p + "mlp.");
      continue;
    }
    MoeWeights& moe = layer.moe.emplace();
    moe.router = load.ToF32(p + "mlp.gate.weight");
    if (config.topk_method == TopkMethod::kNoauxTc) {
      moe.bias = load.ToF32(p + "mlp.gate.e_score_correction_bias");
    }
    const int64_t inter = config.moe_intermediate_size;
    for (int64_t e = 0; e < config.n_routed_experts; ++e) {
      if (report.expert_layout == ExpertLayout::kPerExpert) {
        moe.experts.push_back(load.Mlp(StrCat(p, "mlp.experts.", e, ".")));
      } else {
        moe.experts.push_back({load.FusedExpert(p + "mlp.experts.gate_up_proj", e, 0, inter),
                               load.FusedExpert(p + "mlp.experts.gate_up_proj", e, inter, inter),
                               load.FusedExpert(p + "mlp.experts.down_proj", e, 0, config.hidden_size)});
      }
    }
    if (config.n_shared_experts > 0) moe.shared = load.Mlp(p + "mlp.shared_experts.");
  }
  w.final_norm = load.Norm("model.norm.weight");
  w.lm_head = load.Linear(config.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  return w;
}

}  // namespace latent::model
