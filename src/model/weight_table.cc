#include "model/weight_table.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "base/error.h"
#include "model/arch/registry.h"

namespace latent::model {
namespace {


bool IsFloat8(DType dtype) { return dtype == DType::kF8E4M3; }

// ceil(a / b) for a >= 0, b > 0, without forming a + b - 1 (which overflows for a huge b).
int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Returns the layer index of a "model.layers.{l}." name, or -1.
int64_t LayerOf(const std::string& name) {
  static const std::string kPrefix = "model.layers.";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  char* end = nullptr;
  long long layer = std::strtoll(name.c_str() + kPrefix.size(), &end, 10);
  return (end != nullptr && *end == '.') ? layer : -1;
}

// Tensors a checkpoint may hold that the model never reads, ignored without a word as
// transformers' _keys_to_ignore_on_load_unexpected ignores them: the MTP layers after the
// decoder's (model.layers.{L .. L + num_mtp_layers - 1}), the MTP modules some families name
// apart (LongCat's and dots3's model.mtp.*, Hy4's model.mtp_layers.*), and rotary inv_freq
// buffers that older exports saved.
bool NeverRead(const ModelConfig& config, const std::string& name) {
  const int64_t layer = LayerOf(name);
  if (layer >= config.num_hidden_layers &&
      layer - config.num_hidden_layers < config.num_mtp_layers) {
    return true;
  }
  for (const char* prefix : {"model.mtp.", "model.mtp_layers."}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  const std::string buffer = ".inv_freq";
  return name.size() > buffer.size() &&
         name.compare(name.size() - buffer.size(), buffer.size(), buffer) == 0;
}

// `name` quoted for an error about the tensor's stored values: under the name the checkpoint
// stores it by, with the name it serves as when that differs (a tied checkpoint's LM head stored
// alone, held as the embedding too), so the user looks for the tensor the file holds.
std::string StoredName(const weights::Checkpoint& ckpt, const std::string& name) {
  const std::string& origin = ckpt.Origin(name);
  if (origin == name) return StrCat("'", name, "'");
  return StrCat("'", origin, "' (serving as '", name, "')");
}

// Whether `a` and `b` are both stored, with the same dtype, shape and bytes.
bool SameStoredTensor(const weights::Checkpoint& ckpt, const std::string& a, const std::string& b) {
  if (!ckpt.Has(a) || !ckpt.Has(b)) return false;
  const TensorView x = ckpt.Get(a), y = ckpt.Get(b);
  if (x.dtype != y.dtype || !(x.shape == y.shape)) return false;
  // An alias (a tied head stored alone, held as the embedding too) is one tensor: no bytes to read.
  return x.data == y.data || std::memcmp(x.data, y.data, x.NumBytes()) == 0;
}

// The names of the family's embedding (its tensor list's first kEmbedding entry) and tied LM
// head (its kTiedHead entry), each empty when the list has none.
struct TiedPair {
  std::string embedding, head;
};
TiedPair TiedNames(const std::vector<ExpectedWeight>& weights) {
  TiedPair names;
  for (const ExpectedWeight& w : weights) {
    if (w.kind == WeightKind::kEmbedding && names.embedding.empty()) names.embedding = w.name;
    if (w.presence == Presence::kTiedHead) names.head = w.name;
  }
  return names;
}

}  // namespace

std::vector<ExpectedWeight> ExpectedWeights(const ModelConfig& config, ExpertLayout layout) {
  std::vector<ExpectedWeight> out;
  ArchOf(config).tensors(config, layout, [&](const ExpectedWeight& w) { out.push_back(w); });
  return out;
}

bool Fp8Eligible(const ExpectedWeight& w) {
  return w.kind == WeightKind::kLinear || w.kind == WeightKind::kExperts ||
         w.kind == WeightKind::kUnused;
}

std::vector<ExpectedWeight> ConfigWeights(const ModelConfig& config) {
  std::vector<ExpectedWeight> out;
  ArchOf(config).tensors(config, ExpertLayout::kPerExpert, [&](const ExpectedWeight& w) {
    if (w.presence != Presence::kUnused && w.presence != Presence::kTiedHead) out.push_back(w);
  });
  return out;
}

bool LmHeadTied(const ModelConfig& config, const std::vector<ExpectedWeight>& weights) {
  return config.tie_word_embeddings &&
         std::none_of(weights.begin(), weights.end(),
                      [](const ExpectedWeight& w) { return w.presence == Presence::kTiedHead; });
}

int64_t CountParameters(const std::vector<ExpectedWeight>& weights) {
  int64_t total = 0;
  for (const auto& w : weights)
    if (w.kind != WeightKind::kBuffer && w.presence != Presence::kUnused) {
      total += w.shape.NumElements();
    }
  return total;
}

namespace {

// The checkpoint in `dir` under the text model's names (OpenCheckpoint, before the tie).
weights::Checkpoint OpenLanguageModel(const ModelConfig& config, const std::string& dir) {
  weights::Checkpoint ckpt = weights::Checkpoint::Open(dir);
  if (config.wrapper_model_type.empty()) return ckpt;
  // save_pretrained writes the hub's names (language_model.model.*, language_model.lm_head.*);
  // transformers 5's in-memory names are model.language_model.* and lm_head.*.
  const auto starts = [](const std::string& s, const std::string& prefix) {
    return s.rfind(prefix, 0) == 0;
  };
  bool hub = false, in_memory = false;
  for (const std::string& name : ckpt.Names()) {
    hub = hub || starts(name, "language_model.");
    in_memory = in_memory || starts(name, "model.language_model.");
  }
  if (!hub && !in_memory) {
    // Mistral's native format (mistral_large4): the language model's tensors at the root under
    // the names the family lists (layers.*, tok_embeddings, output, ...), beside the vision
    // encoder and projector, which are dropped with anything else the list does not name.
    std::set<std::string> listed;
    for (ExpertLayout layout : {ExpertLayout::kPerExpert, ExpertLayout::kFused}) {
      for (const ExpectedWeight& w : ExpectedWeights(config, layout)) listed.insert(w.name);
    }
    bool any = false;
    for (const std::string& name : ckpt.Names()) any = any || listed.count(name) > 0;
    if (!any) {
      Fail(dir, ": config.json is a ", config.wrapper_model_type,
           " (vision-language) config, but the checkpoint holds no language_model.* or ",
           "model.language_model.* tensors, nor the language model's tensors at the root");
    }
    const std::string scale = "_scale_inv";  // an fp8 weight's scales go with it
    ckpt.Rename([&](const std::string& name) -> std::string {
      if (listed.count(name)) return name;
      const bool scales = name.size() > scale.size() &&
                          name.compare(name.size() - scale.size(), scale.size(), scale) == 0 &&
                          listed.count(name.substr(0, name.size() - scale.size())) > 0;
      return scales ? name : "";
    });
    return ckpt;
  }
  ckpt.Rename([&](const std::string& name) -> std::string {
    if (hub) return starts(name, "language_model.") ? name.substr(15) : "";
    if (starts(name, "model.language_model.")) return "model." + name.substr(21);
    return starts(name, "lm_head.") ? name : "";
  });
  return ckpt;
}

}  // namespace

weights::Checkpoint OpenCheckpoint(const ModelConfig& config, const std::string& dir) {
  weights::Checkpoint ckpt = OpenLanguageModel(config, dir);
  if (!config.tie_word_embeddings) return ckpt;
  // Tied, with only the LM head stored: transformers ties the pair all the same (tie_weights
  // points the embedding at the head it loaded), so the stored head is the embedding too.
  // Under the embedding's name it is a stored copy of it, which ValidateCheckpoint takes as the
  // tie: loaded once as the embedding, counted once, and --quantize converts a copy for the head.
  const auto [embedding, head] = TiedNames(ExpectedWeights(config, ExpertLayout::kPerExpert));
  if (!embedding.empty() && !head.empty() && !ckpt.Has(embedding) && ckpt.Has(head)) {
    ckpt.Alias(embedding, head);
  }
  return ckpt;
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
  std::set<std::string> explained;
  std::vector<ExpectedWeight> expected = ExpectedWeights(config, report.expert_layout);
  const std::string embedding = TiedNames(expected).embedding;
  for (ExpectedWeight& w : expected) {
    const bool held = ckpt.Has(w.name);
    if (w.presence != Presence::kRequired && !held) continue;
    if (w.presence == Presence::kTiedHead && SameStoredTensor(ckpt, w.name, embedding)) {
      // A stored copy of the embedding is the tie itself (transformers ties an equal pair).
      explained.insert(w.name);
      continue;
    }
    if (w.presence == Presence::kUnused) {
      // Accepted and explained, but neither loaded nor counted (transformers drops it).
      explained.insert(w.name);
      if (!(ckpt.Get(w.name).shape == w.shape)) {
        Fail(ckpt.dir(), ": tensor ", StoredName(ckpt, w.name), " has shape ",
             ckpt.Get(w.name).shape.ToString(), " but config.json implies ", w.shape.ToString());
      }
      continue;
    }
    report.weights.push_back(std::move(w));
  }
  for (const ExpectedWeight& w : report.weights) {
    explained.insert(w.name);
    if (w.kind == WeightKind::kUnused && !ckpt.Has(w.name)) continue;
    if (!ckpt.Has(w.name)) Fail(ckpt.dir(), ": checkpoint is missing tensor '", w.name, "'");
    TensorView t = ckpt.Get(w.name);
    if (!(t.shape == w.shape)) {
      Fail(ckpt.dir(), ": tensor ", StoredName(ckpt, w.name), " has shape ", t.shape.ToString(),
           " but config.json implies ", w.shape.ToString());
    }
    if (IsFloat8(t.dtype)) {
      // Embeddings, the output head, routers, norms and the DSA indexer's weights_proj are read
      // in full precision only, as DeepSeek's fp8 releases store them and as transformers' fp8
      // layers leave them (its CPU fallback dequantizes every weight, these too). Refused
      // rather than dequantized at load: no released checkpoint stores them so.
      if (!Fp8Eligible(w)) {
        Fail(ckpt.dir(), ": tensor ", StoredName(ckpt, w.name), " is ", DTypeName(t.dtype),
             ", but fp8 is read only for linear and expert weights: this tensor (an embedding, "
             "output head, router, norm or indexer weights_proj) must be F32, BF16 or F16");
      }
      if (!config.quantization.fp8) {
        Fail(ckpt.dir(), ": tensor ", StoredName(ckpt, w.name), " is ", DTypeName(t.dtype),
             " but config.json has no fp8 quantization_config");
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
      // An empty scale tensor for a non-empty weight would leave the kernels nothing to read.
      LATENT_CHECK(want.NumElements() > 0 || w.shape.NumElements() == 0);
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
      Fail(ckpt.dir(), ": tensor ", StoredName(ckpt, w.name), " has dtype ", DTypeName(t.dtype),
           " (expected F32, BF16 or F16)");
    }
  }
  for (const std::string& name : ckpt.Names()) {
    if (explained.count(name)) continue;
    (NeverRead(config, name) ? report.ignored : report.unused).push_back(name);
  }
  return report;
}

std::string UnusedTensorsWarning(const CheckpointReport& report, const std::string& dir) {
  if (report.unused.empty()) return "";
  constexpr size_t kNamed = 3;
  std::string names;
  for (size_t i = 0; i < std::min(kNamed, report.unused.size()); ++i) {
    names += StrCat(i > 0 ? ", " : "", "'", report.unused[i], "'");
  }
  if (report.unused.size() > kNamed) names += ", ...";
  return StrCat("latent: warning: ", dir, ": ignoring ", report.unused.size(),
                " checkpoint tensor(s) that config.json does not describe (", names,
                "): a stray tensor, or num_hidden_layers smaller than the layers stored?");
}

std::string LayerPrefix(int64_t layer) { return StrCat("model.layers.", layer, "."); }

}  // namespace latent::model
