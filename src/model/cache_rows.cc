#include "model/cache_rows.h"

#include "base/error.h"

namespace latent::model {
namespace {
// DeepSeek's FP8 latent layout scales each group of 128 latent values with one f32.
constexpr int64_t kFp8ScaleGroup = 128;
}  // namespace

CacheDType ParseCacheDType(const std::string& name, const ModelConfig& config) {
  if (name == "auto") return config.dtype == "float32" ? CacheDType::kF32 : CacheDType::kBF16;
  if (name == "f32" || name == "float32") return CacheDType::kF32;
  if (name == "bf16" || name == "bfloat16") return CacheDType::kBF16;
  if (name == "fp8" || name == "fp8_e4m3") return CacheDType::kFP8;
  Fail("unknown cache dtype '", name, "' (supported: auto, f32, bf16, fp8)");
}

const char* CacheDTypeName(CacheDType dtype) {
  switch (dtype) {
    case CacheDType::kF32: return "f32";
    case CacheDType::kBF16: return "bf16";
    case CacheDType::kFP8: return "fp8";
  }
  return "?";
}

int64_t MlaLatentRowValues(const ModelConfig& c) { return c.kv_lora_rank + c.qk_rope_head_dim; }

uint64_t MlaLatentRowBytes(const ModelConfig& c, CacheDType dtype) {
  switch (dtype) {
    case CacheDType::kF32: return 4 * MlaLatentRowValues(c);
    case CacheDType::kBF16: return 2 * MlaLatentRowValues(c);
    case CacheDType::kFP8: {
      const int64_t groups = (c.kv_lora_rank + kFp8ScaleGroup - 1) / kFp8ScaleGroup;
      return c.kv_lora_rank + 4 * groups + 2 * c.qk_rope_head_dim;
    }
  }
  return 0;
}

std::vector<std::vector<int64_t>> CacheRowValues(const ModelConfig& config) {
  std::vector<std::vector<int64_t>> values(config.num_hidden_layers);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    values[l].push_back(MlaLatentRowValues(config));
    if (config.HasIndexer(l)) values[l].push_back(config.index_head_dim);
  }
  return values;
}

std::vector<int64_t> CacheRowWidths(const ModelConfig& config) {
  std::vector<int64_t> widths{MlaLatentRowValues(config)};
  if (config.is_dsa()) widths.push_back(config.index_head_dim);
  return widths;
}

cache::ModelCacheRows CacheRows(const ModelConfig& config, CacheDType dtype) {
  cache::ModelCacheRows rows(config.num_hidden_layers);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    rows[l].push_back({"mla.latent", MlaLatentRowBytes(config, dtype)});
    if (!config.HasIndexer(l)) continue;
    const int64_t d = config.index_head_dim;
    // fp8: DeepSeek's layout, e4m3 values and one f32 scale per 128 (132 bytes for 128 values).
    const uint64_t bytes = dtype == CacheDType::kF32    ? 4 * d
                           : dtype == CacheDType::kBF16 ? 2 * d
                                                        : d + 4 * ((d + kFp8ScaleGroup - 1) / kFp8ScaleGroup);
    rows[l].push_back({"dsa.index_k", bytes});
  }
  return rows;
}

}  // namespace latent::model
