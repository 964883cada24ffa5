// `latent info --model DIR [--json] [--cache-dtype auto|f32|bf16|fp8] [--block-tokens N]
// [--quantize none|int8|w8a8] [--precision auto|bf16|f32] [--ranks N] [--context N]
// [--sequences N]`: what a checkpoint is, how many parameters it has (as transformers counts
// them), which dtypes it stores, the bytes of its weights as loaded (after --quantize), the
// precision its linears would run in, what each layer caches per token and the cache at a
// context. A DIR holding config.json and no weights is described from its config alone
// (config_estimate.h).
#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>

#include "cache/cache_layout.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "cli/config_estimate.h"
#include "cli/load_options.h"
#include "model/cache_rows.h"
#include "kernels/kernel_table.h"
#include "model/model_config.h"
#include "model/precision.h"
#include "model/weight_quantization.h"
#include "model/weight_table.h"
#include "ops/attended_rows.h"
#include "parallel/communicator.h"
#include "weights/checkpoint.h"

namespace latent::cli {
namespace {

struct InfoOptions {
  std::string model_dir;
  bool json = false;
  std::string cache_dtype = "auto";
  uint32_t block_tokens = cache::kDefaultBlockTokens;  // as the engine's
  LoadFlags load_flags;  // --quantize, --precision
  int ranks = 0;         // 0: the ranks of this job (1 without mpirun)
  int64_t context = 0;   // 0: max_position_embeddings
  int64_t sequences = 1;
};

// What runs one attention call of every layer that makes it: the kernel's name when the layers
// agree, else each name with its count of layers ("amx on 40 layers, f32 fma on 8 layers").
class LayerKernels {
 public:
  void Add(const std::string& call, const char* kernel) {
    auto& names = calls_[call];
    for (auto& [name, layers] : names) {
      if (name == kernel) {
        ++layers;
        return;
      }
    }
    names.emplace_back(kernel, 1);
  }
  nlohmann::json Json() const {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [call, names] : calls_) {
      std::string text = names.size() == 1 ? names[0].first : "";
      for (size_t i = 0; names.size() > 1 && i < names.size(); ++i) {
        text += (i > 0 ? ", " : "") + names[i].first + " on " + std::to_string(names[i].second) +
                " layers";
      }
      out[call] = text;
    }
    return out;
  }

 private:
  std::map<std::string, std::vector<std::pair<std::string, int64_t>>> calls_;
};

// What runs the attention's products (kernels::BestAttentionName and the like), asked with each
// layer's calls as the engine makes them (ops/mla_attention.cc, ops/dsa_indexer.cc,
// ops/kpool_indexer.cc):
//   decode           the absorbed form over the cached latent rows (as the kernels read them:
//                    ops::KernelRowFormat), one shared head
//   prefill          the expanded form's causal and sliding-window tokens over per-head f32 keys
//                    and values
//   prefill_selected (DSA layers) the expanded form's tokens that attend DSA-selected positions,
//                    one `attention` call each over per-head rows (f32 products): only under
//                    --attention expanded (auto runs them absorbed: model::ExpandedPositions)
//   indexer          DSA's index scores over its key rows (KPool's over its pool keys, in place)
// bf16 products where the layer's linears compute in bf16 (model::ApplyPrecision): for the
// attention where kv_b does, which --quantize converts to int8 in every family; for the indexer
// where its query projection does, which every family keeps as stored.
nlohmann::json AttentionKernelsJson(const model::ModelConfig& config,
                                    const cache::ModelCacheRows& rows, model::CacheDType dtype,
                                    model::Precision active, model::WeightQuantization quantize) {
  const bool attention_bf16 =
      active == model::Precision::kBf16 && quantize == model::WeightQuantization::kNone;
  const bool indexer_bf16 = active == model::Precision::kBf16;
  const DType plain = dtype == model::CacheDType::kF32 ? DType::kF32 : DType::kBF16;
  LayerKernels kernels;
  for (int64_t l = 0; l < static_cast<int64_t>(rows.size()); ++l) {
    const model::MlaLayerShape shape = config.LayerShape(l);
    const bool dsa_layer = std::any_of(rows[l].begin(), rows[l].end(), [](const auto& row) {
      return row.name.starts_with("dsa.");
    });
    for (const cache::CacheRowSpec& row : rows[l]) {
      const kernels::RowFormat format =
          ops::KernelRowFormat(ops::StoredRowFormat(plain, row.fp8_values));
      if (row.name.starts_with("mla.latent")) {
        kernels::AttentionArgs decode;  // the latent and its rotary key
        decode.num_heads = shape.num_attention_heads;
        decode.qk_dim = row.values;
        decode.v_dim = shape.kv_lora_rank;
        decode.rows = format;
        decode.bf16_products = attention_bf16;
        kernels.Add("decode", kernels::BestAttentionName(decode));
        // kv_b's per-head k_nope [dn] and values [dv], the shared rotary key [dr] beside them
        kernels::QueriesAttentionArgs prefill;
        prefill.shared.num_heads = shape.num_attention_heads;
        prefill.shared.qk_dim = shape.qk_nope_head_dim + shape.qk_rope_head_dim;
        prefill.shared.key_head_stride = shape.qk_nope_head_dim + shape.v_head_dim;
        prefill.shared_key_dims = shape.qk_rope_head_dim;
        prefill.shared.v_dim = shape.v_head_dim;
        prefill.shared.value_head_stride = shape.qk_nope_head_dim + shape.v_head_dim;
        prefill.bf16_products = attention_bf16;
        kernels.Add("prefill", kernels::BestQueriesAttentionName(prefill));
        if (dsa_layer) {  // one `attention` call per token over whole key rows [dn + dr]
          kernels::AttentionArgs selected = prefill.shared;
          selected.key_head_stride = selected.qk_dim;
          kernels.Add("prefill_selected", kernels::BestAttentionName(selected));
        }
      } else if (row.name == "dsa.index_k" || row.name == "dsa.kpool") {
        kernels::IndexScoreArgs indexer;
        indexer.heads = config.index_n_heads;
        indexer.dim = config.index_head_dim;
        indexer.rows = format;  // token keys, or KPool's pool keys, read in place
        indexer.bf16_products = row.name == "dsa.index_k" && indexer_bf16;
        kernels.Add("indexer", kernels::BestIndexScoresName(indexer));
      }
    }
  }
  return kernels.Json();
}

nlohmann::json BuildInfo(const InfoOptions& opt) {
  const model::ModelConfig config = model::ModelConfig::Load(opt.model_dir);
  if (!weights::Checkpoint::Present(opt.model_dir)) {
    ParseLoadOptions(opt.load_flags);  // unused (every form is shown), but a bad mode is an error
    return ConfigInfo(config, opt.model_dir,
                      {opt.cache_dtype, opt.block_tokens, opt.context, opt.sequences,
                       opt.ranks > 0 ? opt.ranks : parallel::World().size()});
  }
  const weights::Checkpoint ckpt = model::OpenCheckpoint(config, opt.model_dir);
  const model::CheckpointReport report = model::ValidateCheckpoint(config, ckpt);
  const model::CacheDType cache_dtype = model::ParseCacheDType(opt.cache_dtype, config);
  const cache::ModelCacheRows rows = model::CacheRows(config, cache_dtype);
  const cache::CacheLayout layout = cache::CacheLayout::Build(rows, opt.block_tokens);
  const model::LoadOptions load = ParseLoadOptions(opt.load_flags);
  int64_t checkpoint_bytes = 0;
  const int64_t weight_bytes =
      model::LoadedWeightBytes(config, ckpt, report, load.quantize, &checkpoint_bytes);

  nlohmann::json info;
  info["model"] = opt.model_dir;
  info["model_type"] = config.model_type;
  info["architecture"] = config.architecture;
  // A vision-language checkpoint's language model (mistral3 around mistral4).
  if (!config.wrapper_model_type.empty()) info["wrapper_model_type"] = config.wrapper_model_type;
  info["num_layers"] = config.num_hidden_layers;
  info["config"] = ResolvedConfigJson(config);
  info["num_parameters"] = model::CountParameters(report.weights);
  info["expert_layout"] = report.expert_layout == model::ExpertLayout::kFused ? "fused" : "per_expert";
  nlohmann::json dtypes = nlohmann::json::array();
  for (DType d : ckpt.DTypes()) dtypes.push_back(DTypeName(d));
  info["dtypes"] = dtypes;
  info["config_dtype"] = config.dtype;
  if (config.quantization.fp8) {
    info["quantization"] = {{"method", "fp8"},
                            {"weight_block_size",
                             {config.quantization.block_n, config.quantization.block_k}}};
  }
  info["moe"] = {{"routed_experts", config.n_routed_experts},
                 {"experts_per_token", config.num_experts_per_tok},
                 {"shared_experts", config.n_shared_experts},
                 {"identity_experts", config.zero_expert_num},
                 {"topk_method", model::TopkMethodName(config.topk_method)},
                 {"scoring_func", model::ScoringFuncName(config.scoring_func)}};
  // The decoder's weights in memory as loaded with --quantize (the same count the load log gives).
  info["weights"] = {{"quantize", model::WeightQuantizationName(load.quantize)},
                     {"bytes", weight_bytes},
                     {"checkpoint_bytes", checkpoint_bytes}};
  // The linears' arithmetic as loaded with --precision (auto resolved from the stored dtypes),
  // and the kernels this CPU would run them on.
  const model::Precision active = model::ResolvePrecision(load.precision, report, ckpt);
  info["precision"] = {
      {"requested", model::PrecisionName(load.precision)},
      {"active", model::PrecisionName(active)},
      {"kernels", kernels::BestKernelsName()},
      // What runs the bf16 products of the linears; none in f32 precision.
      {"bf16_products",
       active == model::Precision::kBf16 ? kernels::BestBf16ProductsName() : "none"},
      // ... and the products of the fp8 weights; none without fp8 weights or in f32 precision.
      {"fp8_products", active == model::Precision::kBf16 && config.quantization.fp8
                           ? kernels::BestFp8ProductsName(config.quantization.block_n,
                                                          config.quantization.block_k)
                           : "none"}};
  info["attention_kernels"] =
      AttentionKernelsJson(config, rows, cache_dtype, active, load.quantize);
  info["ignored_tensors"] = report.ignored.size();
  info["unused_tensors"] = report.unused;

  info["cache_dtype"] = model::CacheDTypeName(cache_dtype);
  info["cache_layers"] = LayersJson(config, rows, layout);
  info["cache_bytes_per_token"] = cache::BytesPerToken(rows);
  info["cache_bytes_per_sequence"] = cache::BytesPerSequence(rows);
  info["cache_block"] = {{"tokens", layout.block_tokens}, {"bytes", layout.block_bytes}};
  info["cache_at_context"] = CacheAtContext(
      rows, opt.block_tokens, opt.context > 0 ? opt.context : config.max_position_embeddings,
      opt.sequences);
  // Expert parallelism (docs/scale-out.md): each rank's routed experts and weight bytes; the
  // cache is replicated (every rank runs attention), so its bytes per token are every rank's.
  const int ranks = opt.ranks > 0 ? opt.ranks : parallel::World().size();
  if (ranks > 1) {
    nlohmann::json per_rank = nlohmann::json::array();
    for (int r = 0; r < ranks; ++r) {
      const model::ExpertShard shard{r, ranks};
      int64_t stored = 0;
      const int64_t bytes =
          model::LoadedWeightBytes(config, ckpt, report, load.quantize, &stored, shard);
      per_rank.push_back({{"rank", r},
                          {"routed_experts",
                           {shard.Begin(config.n_routed_experts), shard.End(config.n_routed_experts)}},
                          {"weight_bytes", bytes},
                          {"checkpoint_bytes", stored},
                          {"cache_bytes_per_token", cache::BytesPerToken(rows)}});
    }
    info["ranks"] = per_rank;
  }
  return info;
}

void PrintText(const nlohmann::json& info) {
  std::cout << "model:            " << info["model"].get<std::string>() << "\n"
            << "architecture:     " << info["architecture"].get<std::string>() << " (model_type "
            << info["model_type"].get<std::string>()
            << (info.contains("wrapper_model_type")
                    ? " in a " + info["wrapper_model_type"].get<std::string>() + " checkpoint"
                    : std::string())
            << ")\n"
            << "layers:           " << info["num_layers"] << "\n"
            << "parameters:       " << info["num_parameters"] << "\n"
            << "dtypes:           ";
  for (size_t i = 0; i < info["dtypes"].size(); ++i)
    std::cout << (i ? ", " : "") << info["dtypes"][i].get<std::string>();
  std::cout << "\n";
  if (info.contains("quantization")) {
    std::cout << "quantization:     fp8 e4m3, blocks " << info["quantization"]["weight_block_size"][0]
              << "x" << info["quantization"]["weight_block_size"][1] << "\n";
  }
  const auto& weights = info["weights"];
  std::cout << "weight bytes:     " << weights["bytes"] << " (--quantize "
            << weights["quantize"].get<std::string>() << "; checkpoint "
            << weights["checkpoint_bytes"] << ")\n";
  const auto& precision = info["precision"];
  std::cout << "precision:        " << precision["active"].get<std::string>() << " (--precision "
            << precision["requested"].get<std::string>() << "; kernels "
            << precision["kernels"].get<std::string>()
            << (precision["bf16_products"] != "none"
                    ? ", bf16 products on " + precision["bf16_products"].get<std::string>()
                    : std::string())
            << (precision["fp8_products"] != "none"
                    ? ", fp8 weights on " + precision["fp8_products"].get<std::string>()
                    : std::string())
            << ")\n";
  if (!info["attention_kernels"].empty()) {
    const auto& attention = info["attention_kernels"];
    std::cout << "attention:        decode on " << attention["decode"].get<std::string>()
              << ", prefill on " << attention["prefill"].get<std::string>()
              << (attention.contains("prefill_selected")
                      ? ", DSA-selected prefill on " +
                            attention["prefill_selected"].get<std::string>()
                      : std::string())
              << (attention.contains("indexer")
                      ? ", DSA indexer on " + attention["indexer"].get<std::string>()
                      : std::string())
              << " (over " << info["cache_dtype"].get<std::string>() << " rows)\n";
  }
  const auto& moe = info["moe"];
  std::cout << "experts:          " << moe["routed_experts"] << " routed, "
            << moe["experts_per_token"] << " per token, " << moe["shared_experts"] << " shared";
  if (moe["identity_experts"].get<int64_t>() > 0) std::cout << ", " << moe["identity_experts"] << " identity";
  std::cout << "; " << moe["scoring_func"].get<std::string>() << " + "
            << moe["topk_method"].get<std::string>() << " (" << info["expert_layout"].get<std::string>()
            << " layout)\n";
  if (info["ignored_tensors"].get<size_t>() > 0)
    std::cout << "ignored:          " << info["ignored_tensors"]
              << " tensors never read (MTP layers, rotary buffers)\n";
  if (!info["unused_tensors"].empty())
    std::cout << "unused tensors:   " << info["unused_tensors"].size() << "\n";
  std::cout << "cache rows (" << info["cache_dtype"].get<std::string>() << "):\n";
  for (const auto& layer : info["cache_layers"]) {
    if (layer["rows"].empty()) {
      std::cout << "  layer " << layer["layer"] << ": no rows";
      if (layer.contains("kv_source_layer"))
        std::cout << " (attends to layer " << layer["kv_source_layer"] << "'s mla.latent)";
      std::cout << "\n";
    } else if (layer.contains("kv_source_layer")) {
      std::cout << "  layer " << layer["layer"] << ": attends to layer " << layer["kv_source_layer"]
                << "'s mla.latent\n";
    }
    for (const auto& row : layer["rows"]) {
      if (row.contains("bytes_per_sequence")) {
        std::cout << "  layer " << layer["layer"] << ": " << row["name"].get<std::string>() << " "
                  << row["values"] << " values, " << row["bytes_per_sequence"]
                  << " bytes/sequence (state)\n";
        continue;
      }
      std::cout << "  layer " << layer["layer"] << ": " << row["name"].get<std::string>() << " "
                << row["values"] << " values, " << row["bytes_per_token"]
                << " bytes/token, block offset " << row["block_offset"];
      if (row.contains("window_tokens")) std::cout << ", window " << row["window_tokens"];
      std::cout << "\n";
    }
  }
  if (info["cache_bytes_per_sequence"].get<uint64_t>() > 0) {
    std::cout << "cache bytes/sequence: " << info["cache_bytes_per_sequence"]
              << " (per-sequence state, f32; prefix caching off)\n";
  }
  std::cout << "cache bytes/token: " << info["cache_bytes_per_token"] << "\n"
            << "cache block:      " << info["cache_block"]["tokens"] << " tokens, "
            << info["cache_block"]["bytes"] << " bytes\n";
  if (info.contains("ranks")) {
    std::cout << "ranks (" << info["ranks"].size() << ", expert parallel; attention, dense layers, "
              << "shared experts and the cache on every rank):\n";
    for (const auto& rank : info["ranks"]) {
      std::cout << "  rank " << rank["rank"] << ": experts [" << rank["routed_experts"][0] << ", "
                << rank["routed_experts"][1] << "), weight bytes " << rank["weight_bytes"]
                << ", cache bytes/token " << rank["cache_bytes_per_token"] << "\n";
    }
  }
}

}  // namespace

namespace {

Runner RegisterInfo(CLI::App& app) {
  auto opt = std::make_shared<InfoOptions>();
  CLI::App* sub = app.add_subcommand("info", "Describe a checkpoint, or a model from its config.json alone: parameters, "
                         "weight bytes, cache rows and bytes, each rank's share");
  sub->add_option("--model", opt->model_dir,
                  "Hugging Face checkpoint directory; one holding only config.json is described "
                  "from the config alone: parameters, weight bytes as bf16, fp8 blocks and "
                  "--quantize int8 (all three, whatever --quantize says), cache rows and bytes, "
                  "and with --ranks each rank's share")
      ->required();
  sub->add_flag("--json", opt->json, "Print JSON");
  sub->add_option("--cache-dtype", opt->cache_dtype, "auto, f32, bf16 or fp8");
  sub->add_option("--block-tokens", opt->block_tokens, "Tokens per cache block, as serve's")
      ->capture_default_str()
      ->check(Positive(opt->block_tokens));
  sub->add_option("--ranks", opt->ranks,
                  "Show each rank's share for an expert-parallel job of this many ranks (default: "
                  "this job's, under mpirun)")
      ->check(Positive(opt->ranks));
  sub->add_option("--context", opt->context,
                  "Tokens per sequence for the cache bytes at context (default: the config's "
                  "max_position_embeddings)")
      ->check(Positive(opt->context));
  sub->add_option("--sequences", opt->sequences, "Sequences for the cache bytes at context")
      ->capture_default_str()
      ->check(Positive(opt->sequences));
  AddLoadOptions(sub, opt->load_flags);
  return [opt] {
    // Under mpirun every rank could answer; rank 0 prints for all of them.
    if (parallel::World().rank() != 0) return 0;
    nlohmann::json info = BuildInfo(*opt);
    if (opt->json) {
      std::cout << info.dump(2) << "\n";
    } else if (info.contains("source")) {
      PrintConfigInfo(info);  // config.json alone
    } else {
      PrintText(info);
      const auto& at = info["cache_at_context"];
      std::cout << "cache at context: " << at["bytes"] << " bytes for " << at["sequences"]
                << " x " << at["context"] << " tokens";
      if (at["window_tokens_held"].get<int64_t>() > 0) {
        std::cout << " (window rows: the last " << at["window_tokens_held"] << " tokens)";
      }
      std::cout << "\n";
    }
    return 0;
  };
}

}  // namespace

LATENT_COMMAND(10, RegisterInfo);

}  // namespace latent::cli
