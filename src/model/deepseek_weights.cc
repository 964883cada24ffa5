#include "model/deepseek_weights.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>

#include "base/env.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "kernels/kernel_table.h"
#include "kernels/linear.h"
#include "model/deepseek_tensors.h"
#include "model/precision.h"
#include "model/weight_table.h"
#include "threads/thread_pool.h"

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
    // Any other rank is read flat (KDA's conv taps [C, 1, K], A_log [1, 1, H, 1]).
    w.k = t.shape.rank() == 2 ? t.shape[1] : t.shape.NumElements();
    std::vector<float> out(w.n * w.k);
    for (int64_t r = 0; r < w.n; ++r) kernels::RefKernels().dequant_row(w, r, out.data() + r * w.k);
    return out;
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

// Repacks the weights `linear` reads into the kernels' own layout where the chosen kernels have
// one (KernelTable::pack: tiles for bf16 and fp8 compute, blocks for W8A8), once, as they
// are loaded. The packed copy is held in out.owned; the pages of the original (the checkpoint's,
// or a --quantize copy's) are dropped unless something still reads its rows as stored (`release`
// false).
class Packer {
 public:
  explicit Packer(DeepseekWeights& out) : table_(kernels::BestKernels()), out_(out) {}

  void operator()(kernels::WeightRef& w, bool release) {
    int64_t bytes = 0;
    std::unique_ptr<uint8_t[]> packed = kernels::PackForLinear(table_, w, &bytes);
    if (packed == nullptr) return;
    out_.owned.buffers.push_back(std::move(packed));
    // The elements only: scales (and W8A8's row sums) stay where they are, read with the copy.
    const int64_t elements = w.n * w.k * DTypeSize(w.dtype);
    padding_ += bytes - elements;
    if (release) {
      ReleaseMappedPages(w.data, static_cast<size_t>(elements));
    } else {
      copies_ += elements;
    }
  }

  // Bytes held beyond the weights as stored: the packed copies of weights whose rows stay
  // (`release` false), and the padding of every packed copy (rows and columns rounded up to the
  // layout's tiles, none where the model's dimensions are multiples of them; plus the AVX2 fp8
  // layout's 32-byte header per 16 rows).
  int64_t copies() const { return copies_; }
  int64_t padding() const { return padding_; }

 private:
  const kernels::KernelTable& table_;
  DeepseekWeights& out_;
  int64_t copies_ = 0, padding_ = 0;
};

// W_UK^T per head: rows h*C .. h*C + C - 1 of a [H*C, dn] copy of kv_b's key rows (head h's
// rows h*head_rows .. + dn - 1 of [H*head_rows, C]), elements of `elem` bytes (bf16 or fp8 codes).
std::unique_ptr<uint8_t[]> TransposedKeyRows(const kernels::WeightRef& kv_b, int64_t heads,
                                             int64_t head_rows, int64_t dn, int64_t elem) {
  const int64_t c = kv_b.k;
  auto buffer = std::make_unique_for_overwrite<uint8_t[]>(heads * c * dn * elem);
  uint8_t* t = buffer.get();
  const auto* src = static_cast<const uint8_t*>(kv_b.data);  // any alignment
  threads::ParallelFor(heads, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t r = 0; r < dn; ++r) {
        const uint8_t* row = src + (h * head_rows + r) * c * elem;
        for (int64_t col = 0; col < c; ++col) {
          std::memcpy(t + ((h * c + col) * dn + r) * elem, row + col * elem, elem);
        }
      }
    }
  });
  return buffer;
}

// The block scales of TransposedKeyRows' fp8 copy, as f32: its block (h*C/bk + cb, j) is kv_b's
// block (h*head_rows/bn + j, cb), with bn, bk kv_b's block_n, block_k (which the caller checked
// head boundaries do not split). [H*C/bk, ceil(dn/bn)].
std::unique_ptr<uint8_t[]> TransposedKeyScales(const kernels::WeightRef& kv_b, int64_t heads,
                                               int64_t head_rows, int64_t dn) {
  const int64_t c = kv_b.k, bn = kv_b.block_n, bk = kv_b.block_k;
  const int64_t col_blocks = (dn + bn - 1) / bn, kv_cols = (c + bk - 1) / bk;
  auto scales = std::make_unique_for_overwrite<uint8_t[]>(heads * c / bk * col_blocks * 4);
  auto* out = reinterpret_cast<float*>(scales.get());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t cb = 0; cb < c / bk; ++cb) {
      for (int64_t j = 0; j < col_blocks; ++j) {
        const int64_t from = (h * head_rows / bn + j) * kv_cols + cb;
        out[(h * c / bk + cb) * col_blocks + j] = LoadAsF32(kv_b.scale, kv_b.scale_dtype, from);
      }
    }
  }
  return scales;
}

// AttentionWeights::uk_t for each MLA layer whose kv_b is bf16, or fp8 with block scales that
// head boundaries do not split, under bf16 compute and packed (the table packs weights): W_UK^T
// per head in kv_b's element type (TransposedKeyRows, TransposedKeyScales), packed like any
// linear. Both copies are kept (WeightRef::data stays readable). Returns the bytes of the
// transposed copies and their scales. LATENT_KEY_FOLD=transposed skips them all (the fold over
// kv_b's rows as stored, for tests and A/B runs).
int64_t AddKeyFolds(const ModelConfig& config, DeepseekWeights& w, Packer& pack) {
  if (KeyFoldTransposed()) return 0;
  int64_t bytes = 0;
  for (int64_t l = 0; l < static_cast<int64_t>(w.layers.size()); ++l) {
    ops::AttentionWeights& a = w.layers[l].attention;
    const kernels::WeightRef& kv_b = a.kv_b;
    const bool fp8 = kv_b.dtype == DType::kF8E4M3;
    if (w.layers[l].kda || kv_b.data == nullptr || (kv_b.dtype != DType::kBF16 && !fp8) ||
        !kv_b.bf16_activations || kv_b.packed == nullptr) {
      continue;
    }
    // The head count and value dim from the layer's shape, the key rows per head from kv_b as
    // loaded: a NoPE layer (mistral_large4) holds qk_nope + qk_rope of them, which its shape's
    // qk_nope_head_dim does not say. (LongCat's second attention of a layer has index >= the
    // layer count and the model's shape.)
    const MlaLayerShape shape = config.LayerShape(std::min(l, config.num_hidden_layers - 1));
    const int64_t heads = shape.num_attention_heads, c = kv_b.k;
    if (heads <= 0 || kv_b.n % heads != 0) continue;
    const int64_t head_rows = kv_b.n / heads, dn = head_rows - shape.v_head_dim;
    if (dn <= 0) continue;
    const bool scaled = fp8 && kv_b.scale != nullptr;
    if (scaled && (kv_b.block_n <= 0 || kv_b.block_k <= 0 || head_rows % kv_b.block_n != 0 ||
                   c % kv_b.block_k != 0 || kv_b.scale_row0 != 0)) {
      continue;
    }
    const int64_t elem = fp8 ? 1 : 2;
    std::unique_ptr<uint8_t[]> rows = TransposedKeyRows(kv_b, heads, head_rows, dn, elem);
    kernels::WeightRef uk{rows.get(), kv_b.dtype, heads * c, dn};
    uk.bf16_activations = true;
    w.owned.buffers.push_back(std::move(rows));
    bytes += heads * c * dn * elem;
    if (scaled) {
      std::unique_ptr<uint8_t[]> scales = TransposedKeyScales(kv_b, heads, head_rows, dn);
      uk.scale = scales.get();
      uk.scale_dtype = DType::kF32;
      uk.block_n = kv_b.block_k;
      uk.block_k = kv_b.block_n;
      w.owned.buffers.push_back(std::move(scales));
      bytes += heads * c / kv_b.block_k * ((dn + kv_b.block_n - 1) / kv_b.block_n) * 4;
    }
    pack(uk, /*release=*/false);
    if (uk.packed != nullptr) a.uk_t = uk;
  }
  return bytes;
}

}  // namespace

DeepseekWeights LoadDeepseekWeights(const ModelConfig& config, const weights::Checkpoint& ckpt,
                                    DeepseekTensorList tensors, const LoadOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const CheckpointReport report = ValidateCheckpoint(config, ckpt);
  if (const std::string warning = UnusedTensorsWarning(report, ckpt.dir());
      !warning.empty() && options.Shard().rank == 0) {
    std::fprintf(stderr, "%s\n", warning.c_str());
  }
  const Loader load(config, ckpt);
  DeepseekWeights w;
  w.precision = ResolvePrecision(options.precision, report, ckpt);
  Converter convert(options.quantize, w);
  Packer pack(w);
  // Expert parallelism: this rank's routed experts only; the others' stay empty views, their
  // pages never read.
  const ExpertShard shard = options.Shard();
  const int64_t experts = config.n_routed_experts;
  std::string embedding;  // The embedding's name in this family's list (the first kEmbedding).
  // The family's one tensor list, this time with targets: each tensor goes where it says, converted
  // as its rule says.
  // The kOptional and kTiedHead entries the report lists: those to load.
  std::set<std::string> listed;
  for (const ExpectedWeight& t : report.weights) {
    if (t.presence != Presence::kRequired) listed.insert(t.name);
  }
  tensors(config, report.expert_layout, &w, [&](const ExpectedWeight& t) {
    // Not loaded: stored but unused, optional and absent, or a tied head the checkpoint lacks or
    // stores as a copy of the embedding (ValidateCheckpoint left these out of the report).
    if (t.presence != Presence::kRequired && listed.count(t.name) == 0) return;
    if (t.kind == WeightKind::kUnused) return;  // transformers never reads it either
    if (t.expert >= 0 && !shard.Holds(t.expert, experts)) return;  // another rank's expert
    if (t.kind == WeightKind::kEmbedding && embedding.empty()) embedding = t.name;
    const bool quantized = t.quantize != QuantizeRule::kKeep;
    const bool activations = t.quantize == QuantizeRule::kWeightsAndActivations;
    // As --quantize and --precision ask, packed for the kernels' linear (not the embedding, whose
    // rows dequant_row reads). kv_b's key rows are also read as stored (transposed_linear; its
    // rule keeps f32 activations under w8a8), so its pages stay.
    auto converted = [&](const kernels::WeightRef& ref, bool packed = true) {
      kernels::WeightRef out = quantized ? convert(ref, /*release=*/true, activations) : ref;
      ApplyPrecision(w.precision, out);
      if (packed) pack(out, /*release=*/t.quantize != QuantizeRule::kWeights);
      return out;
    };
    if (auto* linear = std::get_if<kernels::WeightRef*>(&t.target)) {
      **linear = converted(load.Linear(t.name), /*packed=*/*linear != &w.embed);
    } else if (auto* norm = std::get_if<NormWeight*>(&t.target)) {
      **norm = load.Norm(t.name);
    } else if (auto* f32 = std::get_if<std::vector<float>*>(&t.target)) {
      **f32 = load.ToF32(t.name);
    } else if (auto* fused = std::get_if<FusedExperts>(&t.target)) {
      const int64_t inter = config.moe_intermediate_size;
      for (int64_t e = shard.Begin(experts); e < shard.End(experts); ++e) {
        MlpWeights& expert = (*fused->experts)[e];
        if (fused->gate_up) {
          expert.gate = converted(load.FusedExpert(t.name, e, 0, inter));
          expert.up = converted(load.FusedExpert(t.name, e, inter, inter));
        } else {
          expert.down = converted(load.FusedExpert(t.name, e, 0, config.hidden_size));
        }
      }
    } else {
      FailInternal("tensor '", t.name, "' has no place to load into");
    }
  });
  // Tied: the LM head is the embedding, which stays as stored (its rows are read per token), and
  // --quantize converts a copy of it.
  if (LmHeadTied(config, report.weights)) {
    w.lm_head = convert(load.Linear(embedding), /*release=*/false);
    ApplyPrecision(w.precision, w.lm_head);
    // The embedding reads its rows as stored; a --quantize copy is read by nothing else.
    pack(w.lm_head, /*release=*/options.quantize != WeightQuantization::kNone);
  }
  const int64_t key_fold_bytes = AddKeyFolds(config, w, pack);
  int64_t checkpoint_bytes = 0;
  LoadedWeightBytes(config, ckpt, report, WeightQuantization::kNone, &checkpoint_bytes, shard);
  for (LayerWeights& layer : w.layers) {
    if (!layer.moe || shard.ranks == 1) continue;
    layer.moe->held_begin = shard.Begin(experts);
    layer.moe->held_end = shard.End(experts);
  }
  w.bytes = checkpoint_bytes - convert.bytes_released() + convert.bytes_added() + pack.copies() +
            key_fold_bytes;
  if (options.quantize != WeightQuantization::kNone) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr,
                 "latent: --quantize %s: %lld weight matrices, %lld -> %lld bytes; weights now "
                 "%lld bytes (checkpoint %lld; the kernels' packed layout pads them by %lld), "
                 "loaded in %.2f s\n",
                 WeightQuantizationName(options.quantize), static_cast<long long>(convert.matrices()),
                 static_cast<long long>(convert.bytes_before()),
                 static_cast<long long>(convert.bytes_added()), static_cast<long long>(w.bytes),
                 static_cast<long long>(checkpoint_bytes), static_cast<long long>(pack.padding()),
                 seconds);
  }
  return w;
}

bool KeyFoldTransposed() { return EnvChoice("LATENT_KEY_FOLD", {"transposed"}).has_value(); }

}  // namespace latent::model
