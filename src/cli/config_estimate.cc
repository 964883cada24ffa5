#include "cli/config_estimate.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <vector>

#include "base/error.h"
#include "model/cache_rows.h"
#include "model/load_options.h"
#include "model/weight_quantization.h"
#include "model/weight_table.h"

namespace latent::cli {
namespace {

// Elements a config may imply, so that every byte count below (at most 9 bytes per element:
// int8 values plus row scales and sums, or f32) fits in int64.
constexpr int64_t kMaxElements = int64_t{1} << 58;

// The weight forms reported: a checkpoint stored as bf16 or as fp8 blocks, loaded as stored or
// with --quantize int8 (from the bf16 checkpoint).
struct WeightForm {
  const char* name;
  model::StoredDType stored;
  model::WeightQuantization quantize;
};
constexpr WeightForm kForms[] = {
    {"bf16", model::StoredDType::kBF16, model::WeightQuantization::kNone},
    {"fp8", model::StoredDType::kFP8Block, model::WeightQuantization::kNone},
    {"int8", model::StoredDType::kBF16, model::WeightQuantization::kInt8},
};

// DeepSeek's blocks when the config names none (a bf16 config estimated as fp8).
constexpr int64_t kDefaultFp8Block = 128;

// Refuses configs whose sizes overflow the counts; returns the list (ConfigWeights).
std::vector<model::ExpectedWeight> ListWeights(const model::ModelConfig& c,
                                               const std::string& source) {
  // ModelConfig::FromJson has bounded the expert MLPs (kMaxExpertMlps) and each dimension.
  std::vector<model::ExpectedWeight> weights = model::ConfigWeights(c);
  int64_t total = 0;
  const model::ExpectedWeight* largest = nullptr;
  for (const model::ExpectedWeight& w : weights) {
    if (largest == nullptr || w.shape.NumElements() > largest->shape.NumElements()) largest = &w;
    if (__builtin_add_overflow(total, w.shape.NumElements(), &total) || total > kMaxElements) {
      Fail(source, ": the sizes imply more than 2^58 weights (the largest tensor so far, '",
           largest->name, "', is ", largest->shape.ToString(), "); no model is this large");
    }
  }
  return weights;
}

// Bytes `shard` holds of `weights` in `form`, and (stored) as its checkpoint stores them.
int64_t FormBytes(const model::ModelConfig& c, const std::vector<model::ExpectedWeight>& weights,
                  const WeightForm& form, const model::ExpertShard& shard, int64_t* stored) {
  const int64_t bn = c.quantization.fp8 ? c.quantization.block_n : kDefaultFp8Block;
  const int64_t bk = c.quantization.fp8 ? c.quantization.block_k : kDefaultFp8Block;
  const auto stored_bytes = [&](const model::ExpectedWeight& w) {
    return model::StoredBytes(w, form.stored, bn, bk);
  };
  return model::LoadedWeightBytes(c, weights, stored_bytes, form.quantize, stored, shard);
}

// Parameters `shard` holds (every listed parameter but other ranks' routed experts).
int64_t ShardParameters(const std::vector<model::ExpectedWeight>& weights, int64_t experts,
                        const model::ExpertShard& shard) {
  std::vector<model::ExpectedWeight> held;
  for (const model::ExpectedWeight& w : weights) {
    if (w.expert < 0 || shard.Holds(w.expert, experts)) held.push_back(w);
  }
  return model::CountParameters(held);
}

nlohmann::json WeightsJson(const model::ModelConfig& c,
                           const std::vector<model::ExpectedWeight>& weights,
                           const model::ExpertShard& shard) {
  nlohmann::json out;
  for (const WeightForm& form : kForms) {
    int64_t stored = 0;
    const int64_t bytes = FormBytes(c, weights, form, shard, &stored);
    out[form.name] = {{"bytes", bytes}, {"checkpoint_bytes", stored}};
  }
  out["fp8"]["block"] = {c.quantization.fp8 ? c.quantization.block_n : kDefaultFp8Block,
                         c.quantization.fp8 ? c.quantization.block_k : kDefaultFp8Block};
  out["int8"]["from"] = "bf16";
  return out;
}


// A hybrid model's cache beside an all-MLA model of the same layer count: every layer caching
// the per-token rows its attention layers declare (the widest, when they differ).
nlohmann::json AllAttentionJson(const cache::ModelCacheRows& rows, uint32_t block_tokens,
                                int64_t context, int64_t sequences) {
  const std::vector<cache::CacheRowSpec>* widest = nullptr;
  uint64_t widest_bytes = 0;
  for (const auto& layer : rows) {
    uint64_t bytes = 0;
    for (const auto& row : layer) bytes += row.bytes_per_token;
    if (bytes > widest_bytes) {
      widest_bytes = bytes;
      widest = &layer;
    }
  }
  if (widest == nullptr) return nullptr;
  const cache::ModelCacheRows all(rows.size(), *widest);
  const cache::CacheLayout layout = cache::CacheLayout::Build(all, block_tokens);
  nlohmann::json names = nlohmann::json::array();
  for (const auto& row : *widest) names.push_back(row.name);
  return {{"rows", names},
          {"cache_bytes_per_token", cache::BytesPerToken(all)},
          {"cache_at_context", CacheAtContext(all, block_tokens, context, sequences)}};
}

// "1,342.2 GB"-style decimal size for the text form.
std::string Gb(int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f GB", static_cast<double>(bytes) / 1e9);
  return text;
}

std::string Num(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

// "0-2, 4-6, 8" for sorted layer numbers.
std::string Ranges(const std::vector<int64_t>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(layers[i]);
    if (j > i) out += "-" + std::to_string(layers[j]);
    i = j + 1;
  }
  return out;
}

std::string RowText(const nlohmann::json& row) {
  if (row.contains("bytes_per_sequence")) {
    return row["name"].get<std::string>() + " " + Num(row["values"].get<int64_t>()) + " values, " +
           Num(row["bytes_per_sequence"].get<int64_t>()) + " bytes/sequence (state, f32)";
  }
  return row["name"].get<std::string>() + " " + Num(row["values"].get<int64_t>()) + " values, " +
         Num(row["bytes_per_token"].get<int64_t>()) + " bytes/token";
}

std::string CacheText(const nlohmann::json& at) {
  std::string text =
      Num(at["bytes"].get<int64_t>()) + " bytes (" + Gb(at["bytes"].get<int64_t>()) + ")";
  if (at["state_bytes"].get<int64_t>() > 0) {
    text += ", of which state " + Num(at["state_bytes"].get<int64_t>());
  }
  return text;
}

}  // namespace

const char* RetentionName(cache::Retention retention) {
  switch (retention) {
    case cache::Retention::kFull: return "full";
    case cache::Retention::kPerSequence: return "per_sequence";
    case cache::Retention::kWindow: return "window";
  }
  return "?";
}

nlohmann::json ResolvedConfigJson(const model::ModelConfig& c) {
  nlohmann::json mlp = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    mlp.push_back(c.IsMoeLayer(l) ? "sparse" : "dense");
  }
  return {{"rms_norm_eps", c.rms_norm_eps},
          {"max_position_embeddings", c.max_position_embeddings},
          {"mlp_layer_types", std::move(mlp)},
          {"n_shared_experts", c.n_shared_experts},
          {"routed_scaling_factor", c.routed_scaling_factor},
          {"norm_topk_prob", c.norm_topk_prob},
          {"n_group", c.n_group},
          {"topk_group", c.topk_group},
          {"bos_token_id", c.bos_token_id ? nlohmann::json(*c.bos_token_id) : nlohmann::json()},
          {"eos_token_id", c.eos_token_ids}};
}

nlohmann::json LayersJson(const model::ModelConfig& c, const cache::ModelCacheRows& rows,
                          const cache::CacheLayout& layout) {
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < rows.size(); ++l) {
    nlohmann::json layer_rows = nlohmann::json::array();
    for (size_t r = 0; r < rows[l].size(); ++r) {
      const cache::CacheRowSpec& row = rows[l][r];
      if (row.retention == cache::Retention::kPerSequence) {
        // Per-sequence state (a KDA layer's): a fixed size per running sequence, not per token.
        layer_rows.push_back({{"name", row.name},
                              {"values", row.values},
                              {"retention", "sequence"},
                              {"bytes_per_token", 0},
                              {"bytes_per_sequence", row.bytes_per_sequence}});
        continue;
      }
      layer_rows.push_back({{"name", row.name},
                            {"values", row.values},
                            {"bytes_per_token", row.bytes_per_token},
                            {"block_offset", layout.slab_offset[l][r]},
                            {"retention", RetentionName(row.retention)}});
      if (row.retention == cache::Retention::kWindow) layer_rows.back()["window_tokens"] = row.window_tokens;
    }
    nlohmann::json layer = {{"layer", l}, {"rows", layer_rows}};
    // KV sharing: the layer attends to the latent rows of another layer (and caches none).
    const int64_t source = c.KvSourceLayer(static_cast<int64_t>(l));
    if (source != static_cast<int64_t>(l)) layer["kv_source_layer"] = source;
    layers.push_back(layer);
  }
  return layers;
}


nlohmann::json CacheAtContext(const cache::ModelCacheRows& rows, uint32_t block_tokens,
                              int64_t context, int64_t sequences) {
  // The blocks the engine holds for one sequence whose next token is at `context`: every full
  // block of the full-retention rows, and of the window rows (their own blocks, GroupedLayout)
  // only those that still hold a position of that token's window (the engine frees the others).
  const cache::GroupedLayout groups = cache::GroupedLayout::Build(rows, block_tokens);
  int64_t blocks = (context + block_tokens - 1) / block_tokens;
  int64_t window_tokens_held = 0;
  if (groups.has_window) {
    int64_t window = 0;
    for (const auto& layer : rows) {
      for (const auto& row : layer) {
        if (row.retention == cache::Retention::kWindow) window = std::max(window, row.window_tokens);
      }
    }
    const int64_t w = groups.window_block_tokens;
    const int64_t first_kept = std::max<int64_t>(0, context - window + 1) / w;
    const int64_t held = (context + w - 1) / w - first_kept;
    blocks += held;
    window_tokens_held = std::min(context, held * w);
  }
  const int64_t state = static_cast<int64_t>(cache::BytesPerSequence(rows));
  int64_t per_sequence = 0, bytes = 0;
  if (__builtin_mul_overflow(blocks, static_cast<int64_t>(groups.block_bytes), &per_sequence) ||
      __builtin_add_overflow(per_sequence, state, &per_sequence) ||
      __builtin_mul_overflow(per_sequence, sequences, &bytes)) {
    Fail("--context ", context, " x --sequences ", sequences,
         ": the cache would exceed 2^63 bytes");
  }
  return {{"context", context},
          {"sequences", sequences},
          {"blocks_per_sequence", blocks},
          {"block_bytes", groups.block_bytes},
          {"window_tokens_held", window_tokens_held},
          {"state_bytes", state * sequences},
          {"bytes", bytes}};
}

nlohmann::json ConfigInfo(const model::ModelConfig& c, const std::string& dir,
                          const ConfigInfoOptions& opt) {
  const std::string source = dir + "/config.json";
  if (opt.ranks < 1 || opt.ranks > kMaxInfoRanks) {
    Fail("--ranks ", opt.ranks, ": must be between 1 and ", kMaxInfoRanks);
  }
  if (opt.context < 0 || opt.sequences < 1) {
    Fail("--context must not be negative and --sequences must be positive");
  }
  const std::vector<model::ExpectedWeight> weights = ListWeights(c, source);
  const model::CacheDType cache_dtype = model::ParseCacheDType(opt.cache_dtype, c);
  const cache::ModelCacheRows rows = model::CacheRows(c, cache_dtype);
  const cache::CacheLayout layout = cache::CacheLayout::Build(rows, opt.block_tokens);
  const int64_t context = opt.context > 0 ? opt.context : c.max_position_embeddings;

  nlohmann::json info;
  info["model"] = dir;
  info["source"] = "config.json";
  info["model_type"] = c.model_type;
  info["architecture"] = c.architecture;
  if (!c.wrapper_model_type.empty()) info["wrapper_model_type"] = c.wrapper_model_type;
  info["num_layers"] = c.num_hidden_layers;
  int64_t moe = 0, linear = 0, indexer = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    moe += c.IsMoeLayer(l) ? 1 : 0;
    linear += c.IsLinearAttentionLayer(l) ? 1 : 0;
    indexer += c.HasIndexer(l) ? 1 : 0;
  }
  info["layer_kinds"] = {{"moe", moe},
                         {"dense", c.num_hidden_layers - moe},
                         {"linear_attention", linear},
                         {"mla", c.num_hidden_layers - linear},
                         {"dsa_indexer", indexer}};
  info["config"] = ResolvedConfigJson(c);
  info["num_parameters"] = model::CountParameters(weights);
  info["config_dtype"] = c.dtype;
  info["moe"] = {{"routed_experts", c.n_routed_experts},
                 {"experts_per_token", c.num_experts_per_tok},
                 {"shared_experts", c.n_shared_experts},
                 {"identity_experts", c.zero_expert_num},
                 {"topk_method", model::TopkMethodName(c.topk_method)},
                 {"scoring_func", model::ScoringFuncName(c.scoring_func)}};
  info["weights"] = WeightsJson(c, weights, {});

  info["cache_dtype"] = model::CacheDTypeName(cache_dtype);
  info["cache_layers"] = LayersJson(c, rows, layout);
  info["cache_bytes_per_token"] = cache::BytesPerToken(rows);
  info["cache_bytes_per_sequence"] = cache::BytesPerSequence(rows);
  info["cache_block"] = {{"tokens", layout.block_tokens}, {"bytes", layout.block_bytes}};
  info["cache_at_context"] = CacheAtContext(rows, opt.block_tokens, context, opt.sequences);
  if (cache::BytesPerSequence(rows) > 0) {
    info["all_attention_equivalent"] =
        AllAttentionJson(rows, opt.block_tokens, context, opt.sequences);
  }

  if (opt.ranks > 1) {
    // Expert parallelism as the loader splits it (ExpertShard): each rank its range of routed
    // experts, everything else and the whole cache on every rank (docs/scale-out.md).
    nlohmann::json per_rank = nlohmann::json::array();
    for (int r = 0; r < opt.ranks; ++r) {
      const model::ExpertShard shard{r, opt.ranks};
      per_rank.push_back(
          {{"rank", r},
           {"routed_experts", {shard.Begin(c.n_routed_experts), shard.End(c.n_routed_experts)}},
           {"num_parameters", ShardParameters(weights, c.n_routed_experts, shard)},
           {"weights", WeightsJson(c, weights, shard)},
           {"cache_bytes_per_token", cache::BytesPerToken(rows)},
           {"cache_bytes_at_context", info["cache_at_context"]["bytes"]}});
    }
    // Hybrid models: every rank keeps its own copy of each sequence's state (docs/scale-out.md),
    // which cache_bytes_at_context includes.
    info["ranks"] = per_rank;
  }
  return info;
}

void PrintConfigInfo(const nlohmann::json& info) {
  const auto& kinds = info["layer_kinds"];
  std::cout << "model:            " << info["model"].get<std::string>()
            << " (config.json only: no weights)\n"
            << "architecture:     " << info["architecture"].get<std::string>() << " (model_type "
            << info["model_type"].get<std::string>()
            << (info.contains("wrapper_model_type")
                    ? " in a " + info["wrapper_model_type"].get<std::string>() + " config"
                    : std::string())
            << ")\n"
            << "layers:           " << info["num_layers"] << " (" << kinds["dense"] << " dense, "
            << kinds["moe"] << " MoE";
  if (kinds["linear_attention"].get<int64_t>() > 0) {
    std::cout << "; " << kinds["mla"] << " MLA, " << kinds["linear_attention"]
              << " linear attention";
  }
  if (kinds["dsa_indexer"].get<int64_t>() > 0)
    std::cout << "; " << kinds["dsa_indexer"] << " DSA indexers";
  std::cout << ")\n"
            << "parameters:       " << Num(info["num_parameters"].get<int64_t>()) << "\n";
  const auto& moe = info["moe"];
  std::cout << "experts:          " << moe["routed_experts"] << " routed, "
            << moe["experts_per_token"] << " per token, " << moe["shared_experts"] << " shared";
  if (moe["identity_experts"].get<int64_t>() > 0)
    std::cout << ", " << moe["identity_experts"] << " identity";
  std::cout << "; " << moe["scoring_func"].get<std::string>() << " + "
            << moe["topk_method"].get<std::string>() << "\n";
  const auto& w = info["weights"];
  std::cout << "weight bytes:     bf16 " << Num(w["bf16"]["bytes"].get<int64_t>()) << " ("
            << Gb(w["bf16"]["bytes"].get<int64_t>()) << ")\n"
            << "                  fp8 blocks " << w["fp8"]["block"][0] << "x"
            << w["fp8"]["block"][1] << " " << Num(w["fp8"]["bytes"].get<int64_t>()) << " ("
            << Gb(w["fp8"]["bytes"].get<int64_t>()) << ")\n"
            << "                  --quantize int8 " << Num(w["int8"]["bytes"].get<int64_t>())
            << " (" << Gb(w["int8"]["bytes"].get<int64_t>()) << ")\n";

  // Layers grouped by what they cache: "layers 0-2, 4-6: kda.conv ...".
  std::cout << "cache rows (" << info["cache_dtype"].get<std::string>() << "):\n";
  std::map<std::string, std::vector<int64_t>> groups;
  std::vector<std::string> order;
  for (const auto& layer : info["cache_layers"]) {
    std::string key;
    for (const auto& row : layer["rows"]) key += (key.empty() ? "" : "; ") + RowText(row);
    if (key.empty()) key = "no rows";
    if (layer.contains("kv_source_layer")) {
      key += " (attends to layer " + std::to_string(layer["kv_source_layer"].get<int64_t>()) +
             "'s mla.latent)";
    }
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(layer["layer"].get<int64_t>());
  }
  for (const std::string& key : order) {
    const auto& layers = groups[key];
    std::cout << "  " << (layers.size() > 1 ? "layers " : "layer ") << Ranges(layers) << ": " << key
              << "\n";
  }
  std::cout << "cache bytes/token: " << Num(info["cache_bytes_per_token"].get<int64_t>()) << "\n";
  if (info["cache_bytes_per_sequence"].get<int64_t>() > 0) {
    std::cout << "cache bytes/sequence: " << Num(info["cache_bytes_per_sequence"].get<int64_t>())
              << " (per-sequence state; prefix caching off)\n";
  }
  const auto& at = info["cache_at_context"];
  std::cout << "cache at " << Num(at["context"].get<int64_t>()) << " tokens x " << at["sequences"]
            << (at["sequences"].get<int64_t>() == 1 ? " sequence: " : " sequences: ")
            << CacheText(at) << " (" << Num(at["blocks_per_sequence"].get<int64_t>())
            << " blocks of " << info["cache_block"]["tokens"] << " tokens per sequence)\n";
  if (info.contains("all_attention_equivalent") && !info["all_attention_equivalent"].is_null()) {
    const auto& all = info["all_attention_equivalent"];
    const int64_t bytes = all["cache_at_context"]["bytes"].get<int64_t>();
    std::cout << "all-MLA equivalent (every layer caching";
    for (const auto& name : all["rows"]) std::cout << " " << name.get<std::string>();
    std::cout << "): " << Num(all["cache_bytes_per_token"].get<int64_t>()) << " bytes/token, "
              << Num(bytes) << " bytes (" << Gb(bytes) << ") at this context; this model holds "
              << static_cast<int>(100.0 * static_cast<double>(at["bytes"].get<int64_t>()) /
                                      static_cast<double>(bytes) +
                                  0.5)
              << "% of it\n";
  }
  if (info.contains("ranks")) {
    std::cout
        << "ranks (" << info["ranks"].size()
        << ", expert parallel; attention, dense layers, shared experts and the cache on every "
           "rank):\n";
    for (const auto& rank : info["ranks"]) {
      const auto& rw = rank["weights"];
      std::cout << "  rank " << rank["rank"] << ": experts [" << rank["routed_experts"][0] << ", "
                << rank["routed_experts"][1] << "), " << Num(rank["num_parameters"].get<int64_t>())
                << " parameters; weight bytes bf16 " << Gb(rw["bf16"]["bytes"].get<int64_t>())
                << ", fp8 " << Gb(rw["fp8"]["bytes"].get<int64_t>()) << ", int8 "
                << Gb(rw["int8"]["bytes"].get<int64_t>()) << "; cache "
                << Gb(rank["cache_bytes_at_context"].get<int64_t>()) << "\n";
    }
  }
}

}  // namespace latent::cli
