#include "model/weight_table.h"

#include <cstdlib>
#include <set>

#include "base/error.h"

namespace latent::model {
namespace {

std::string LayerPrefix(int64_t layer) { return StrCat("model.layers.", layer, "."); }

void AddAttention(const ModelConfig& c, const std::string& p, std::vector<ExpectedWeight>& out) {
  const int64_t h = c.num_attention_heads;
  const int64_t d = c.hidden_size;
  const std::string a = p + "self_attn.";
  if (c.q_lora_rank) {
    out.push_back({a + "q_a_proj.weight", {*c.q_lora_rank, d}, WeightKind::kLinear});
    out.push_back({a + "q_a_layernorm.weight", {*c.q_lora_rank}, WeightKind::kNorm});
    out.push_back({a + "q_b_proj.weight", {h * c.qk_head_dim(), *c.q_lora_rank}, WeightKind::kLinear});
  } else {
    out.push_back({a + "q_proj.weight", {h * c.qk_head_dim(), d}, WeightKind::kLinear});
  }
  out.push_back({a + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, d},
                 WeightKind::kLinear});
  out.push_back({a + "kv_a_layernorm.weight", {c.kv_lora_rank}, WeightKind::kNorm});
  out.push_back({a + "kv_b_proj.weight", {h * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
                 WeightKind::kLinear});
  out.push_back({a + "o_proj.weight", {d, h * c.v_head_dim}, WeightKind::kLinear});
}

void AddIndexer(const ModelConfig& c, const std::string& p, std::vector<ExpectedWeight>& out) {
  const std::string x = p + "self_attn.indexer.";
  const int64_t di = c.index_head_dim;
  out.push_back({x + "wq_b.weight", {c.index_n_heads * di, *c.q_lora_rank}, WeightKind::kLinear});
  out.push_back({x + "wk.weight", {di, c.hidden_size}, WeightKind::kLinear});
  out.push_back({x + "k_norm.weight", {di}, WeightKind::kNorm});
  out.push_back({x + "k_norm.bias", {di}, WeightKind::kNorm});
  // Kept in f32 and never quantized, like the router.
  out.push_back({x + "weights_proj.weight", {c.index_n_heads, c.hidden_size}, WeightKind::kRouter});
}

void AddMlp(const std::string& p, int64_t d, int64_t inter, std::vector<ExpectedWeight>& out) {
  out.push_back({p + "gate_proj.weight", {inter, d}, WeightKind::kLinear});
  out.push_back({p + "up_proj.weight", {inter, d}, WeightKind::kLinear});
  out.push_back({p + "down_proj.weight", {d, inter}, WeightKind::kLinear});
}

void AddMoe(const ModelConfig& c, const std::string& p, ExpertLayout layout,
            std::vector<ExpectedWeight>& out) {
  const int64_t d = c.hidden_size;
  const int64_t e = c.n_routed_experts;
  const int64_t i = c.moe_intermediate_size;
  out.push_back({p + "mlp.gate.weight", {e, d}, WeightKind::kRouter});
  if (c.topk_method == TopkMethod::kNoauxTc) {
    out.push_back({p + "mlp.gate.e_score_correction_bias", {e}, WeightKind::kBuffer});
  }
  if (layout == ExpertLayout::kPerExpert) {
    for (int64_t x = 0; x < e; ++x) AddMlp(StrCat(p, "mlp.experts.", x, "."), d, i, out);
  } else {
    out.push_back({p + "mlp.experts.gate_up_proj", {e, 2 * i, d}, WeightKind::kExperts});
    out.push_back({p + "mlp.experts.down_proj", {e, d, i}, WeightKind::kExperts});
  }
  if (c.n_shared_experts > 0) AddMlp(p + "mlp.shared_experts.", d, i * c.n_shared_experts, out);
}

bool IsFloat8(DType dtype) { return dtype == DType::kF8E4M3; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Returns the layer index of a "model.layers.{l}." name, or -1.
int64_t LayerOf(const std::string& name) {
  static const std::string kPrefix = "model.layers.";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  char* end = nullptr;
  long long layer = std::strtoll(name.c_str() + kPrefix.size(), &end, 10);
  return (end != nullptr && *end == '.') ? layer : -1;
}

}  // namespace

std::vector<ExpectedWeight> ExpectedWeights(const ModelConfig& c, ExpertLayout layout) {
  std::vector<ExpectedWeight> out;
  const int64_t d = c.hidden_size;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, d}, WeightKind::kEmbedding});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = LayerPrefix(l);
    out.push_back({p + "input_layernorm.weight", {d}, WeightKind::kNorm});
    AddAttention(c, p, out);
    if (c.HasIndexer(l)) AddIndexer(c, p, out);
    out.push_back({p + "post_attention_layernorm.weight", {d}, WeightKind::kNorm});
    if (c.IsMoeLayer(l)) {
      AddMoe(c, p, layout, out);
    } else {
      AddMlp(p + "mlp.", d, c.intermediate_size, out);
    }
  }
  out.push_back({"model.norm.weight", {d}, WeightKind::kNorm});
  if (!c.tie_word_embeddings) {
    out.push_back({"lm_head.weight", {c.vocab_size, d}, WeightKind::kEmbedding});
  }
  return out;
}

int64_t CountParameters(const std::vector<ExpectedWeight>& weights) {
  int64_t total = 0;
  for (const auto& w : weights)
    if (w.kind != WeightKind::kBuffer) total += w.shape.NumElements();
  return total;
}

CheckpointReport ValidateCheckpoint(const ModelConfig& config, const weights::Checkpoint& ckpt) {
  CheckpointReport report;
  // Released checkpoints store experts one by one; transformers' in-memory fused layout is
  // accepted too. The first MoE layer decides.
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    if (!config.IsMoeLayer(l)) continue;
    if (ckpt.Has(LayerPrefix(l) + "mlp.experts.gate_up_proj")) report.expert_layout = ExpertLayout::kFused;
    break;
  }
  report.weights = ExpectedWeights(config, report.expert_layout);

  std::set<std::string> explained;
  for (const ExpectedWeight& w : report.weights) {
    explained.insert(w.name);
    if (!ckpt.Has(w.name)) Fail(ckpt.dir(), ": checkpoint is missing tensor '", w.name, "'");
    TensorView t = ckpt.Get(w.name);
    if (!(t.shape == w.shape)) {
      Fail(ckpt.dir(), ": tensor '", w.name, "' has shape ", t.shape.ToString(), " but config.json implies ",
           w.shape.ToString());
    }
    const bool quantizable = w.kind == WeightKind::kLinear || w.kind == WeightKind::kExperts;
    if (IsFloat8(t.dtype)) {
      if (!config.quantization.fp8 || !quantizable) {
        Fail(ckpt.dir(), ": tensor '", w.name, "' is ", DTypeName(t.dtype),
             " but config.json has no fp8 quantization_config for it");
      }
      const std::string scale_name = w.name + "_scale_inv";
      if (!ckpt.Has(scale_name)) {
        Fail(ckpt.dir(), ": fp8 tensor '", w.name, "' has no '", scale_name, "'");
      }
      TensorView s = ckpt.Get(scale_name);
      Shape want;
      for (int i = 0; i + 2 < w.shape.rank(); ++i) want.Append(w.shape[i]);
      want.Append(CeilDiv(w.shape[w.shape.rank() - 2], config.quantization.block_n));
      want.Append(CeilDiv(w.shape[w.shape.rank() - 1], config.quantization.block_k));
      if (!(s.shape == want)) {
        Fail(ckpt.dir(), ": '", scale_name, "' has shape ", s.shape.ToString(), " but weight ",
             w.shape.ToString(), " with blocks [", config.quantization.block_n, ", ",
             config.quantization.block_k, "] needs ", want.ToString());
      }
      if (s.dtype != DType::kF32 && s.dtype != DType::kBF16 && s.dtype != DType::kF8E8M0) {
        Fail(ckpt.dir(), ": '", scale_name, "' has dtype ", DTypeName(s.dtype),
             " (expected F32, BF16 or F8_E8M0)");
      }
      explained.insert(scale_name);
    } else if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
      Fail(ckpt.dir(), ": tensor '", w.name, "' has dtype ", DTypeName(t.dtype),
           " (expected F32, BF16 or F16)");
    }
  }
  for (const std::string& name : ckpt.Names()) {
    if (explained.count(name)) continue;
    if (LayerOf(name) >= config.num_hidden_layers) {
      report.ignored.push_back(name);
    } else {
      report.unused.push_back(name);
    }
  }
  return report;
}

}  // namespace latent::model
