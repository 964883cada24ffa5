#include "model/deepseek_weights.h"

#include <chrono>
#include <cstdio>

#include "base/error.h"
#include "base/mapped_file.h"
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

// Applies --quantize to the decoder's linear weights as they are loaded.
class Converter {
 public:
  Converter(WeightQuantization mode, DeepseekWeights& out) : mode_(mode), out_(out) {}

  // `w` converted (or as is with --quantize none). `release`: the original is read by nothing
  // else, so its pages leave the mapping once converted. `activations`: w8a8 quantizes this
  // linear's inputs too (all but kv_b, see W8A8Activations).
  kernels::WeightRef operator()(const kernels::WeightRef& w, bool release = true,
                                bool activations = true) {
    if (mode_ == WeightQuantization::kNone) return w;
    const bool w8a8 = mode_ == WeightQuantization::kW8A8 && activations;
    const kernels::WeightRef q = QuantizeInt8(w, out_.owned, /*row_sums=*/w8a8);
    ++matrices_;
    bytes_before_ += WeightBytes(w);
    bytes_after_ += WeightBytes(q);
    if (release) {
      ReleaseMappedPages(w.data, static_cast<size_t>(w.n * w.k) * DTypeSize(w.dtype));
    } else {
      shared_bytes_ += WeightBytes(w);  // a tied LM head: the embedding stays
    }
    return q;
  }
  MlpWeights operator()(const MlpWeights& m) { return {(*this)(m.gate), (*this)(m.up), (*this)(m.down)}; }

  int64_t matrices() const { return matrices_; }
  // Bytes removed from the checkpoint's (those of converted originals that are not shared).
  int64_t bytes_released() const { return bytes_before_ - shared_bytes_; }
  int64_t bytes_added() const { return bytes_after_; }
  int64_t bytes_before() const { return bytes_before_; }

 private:
  WeightQuantization mode_;
  DeepseekWeights& out_;
  int64_t matrices_ = 0, bytes_before_ = 0, bytes_after_ = 0, shared_bytes_ = 0;
};

}  // namespace

DeepseekWeights LoadDeepseekWeights(const ModelConfig& config, const weights::Checkpoint& ckpt,
                                    const LoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const CheckpointReport report = ValidateCheckpoint(config, ckpt);
  const Loader load(config, ckpt);
  DeepseekWeights w;
  Converter convert(options.quantize, w);
  w.embed = load.Linear("model.embed_tokens.weight");
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const std::string p = StrCat("model.layers.", l, ".");
    LayerWeights& layer = w.layers.emplace_back();
    layer.input_norm = load.Norm(p + "input_layernorm.weight");
    layer.post_attention_norm = load.Norm(p + "post_attention_layernorm.weight");
    AttentionWeights& a = layer.attention;
    const std::string s = p + "self_attn.";
    if (config.q_lora_rank) {
      a.q_a = convert(load.Linear(s + "q_a_proj.weight"));
      a.q_a_norm = load.Norm(s + "q_a_layernorm.weight");
      a.q_b = convert(load.Linear(s + "q_b_proj.weight"));
    } else {
      a.q_proj = convert(load.Linear(s + "q_proj.weight"));
    }
    a.kv_a = convert(load.Linear(s + "kv_a_proj_with_mqa.weight"));
    a.kv_a_norm = load.Norm(s + "kv_a_layernorm.weight");
    a.kv_b = convert(load.Linear(s + "kv_b_proj.weight"), /*release=*/true,
                     W8A8Activations(s + "kv_b_proj.weight"));
    a.o = convert(load.Linear(s + "o_proj.weight"));
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
      layer.dense = convert(load.Mlp(p + "mlp."));
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
        moe.experts.push_back(convert(load.Mlp(StrCat(p, "mlp.experts.", e, "."))));
      } else {
        moe.experts.push_back(
            convert(MlpWeights{load.FusedExpert(p + "mlp.experts.gate_up_proj", e, 0, inter),
                               load.FusedExpert(p + "mlp.experts.gate_up_proj", e, inter, inter),
                               load.FusedExpert(p + "mlp.experts.down_proj", e, 0, config.hidden_size)}));
      }
    }
    if (config.n_shared_experts > 0) moe.shared = convert(load.Mlp(p + "mlp.shared_experts."));
  }
  w.final_norm = load.Norm("model.norm.weight");
  // Tied: the LM head is the embedding, which stays as stored (its rows are read per token).
  w.lm_head = convert(load.Linear(config.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"),
                      /*release=*/!config.tie_word_embeddings);
  int64_t checkpoint_bytes = 0;
  LoadedWeightBytes(config, ckpt, report, WeightQuantization::kNone, &checkpoint_bytes);
  w.bytes = checkpoint_bytes - convert.bytes_released() + convert.bytes_added();
  if (options.quantize != WeightQuantization::kNone) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr,
                 "latent: --quantize %s: %lld weight matrices, %lld -> %lld bytes; weights now "
                 "%lld bytes (checkpoint %lld), loaded in %.2f s\n",
                 WeightQuantizationName(options.quantize), static_cast<long long>(convert.matrices()),
                 static_cast<long long>(convert.bytes_before()),
                 static_cast<long long>(convert.bytes_added()), static_cast<long long>(w.bytes),
                 static_cast<long long>(checkpoint_bytes), seconds);
  }
  return w;
}

}  // namespace latent::model
