#include "model/cache_rows.h"

#include "base/error.h"
#include "cache/fp8_rows.h"
#include "model/arch/registry.h"
#include "ops/kda.h"

namespace latent::model {
CacheDType ParseCacheDType(const std::string& name, const ModelConfig& config) {
  if (name == "auto") return config.dtype == "float32" ? CacheDType::kF32 : CacheDType::kBF16;
  if (name == "f32" || name == "float32") return CacheDType::kF32;
  if (name == "bf16" || name == "bfloat16") return CacheDType::kBF16;
  if (name == "fp8" || name == "fp8_e4m3") return CacheDType::kFP8;
  Fail("--cache-dtype: unknown cache dtype '", name, "' (supported: auto, f32, bf16, fp8)");
}

const char* CacheDTypeName(CacheDType dtype) {
  switch (dtype) {
    case CacheDType::kF32: return "f32";
    case CacheDType::kBF16: return "bf16";
    case CacheDType::kFP8: return "fp8";
  }
  return "?";
}

cache::CacheRowSpec MlaLatentRow(const ModelConfig& c, CacheDType dtype) {
  return MlaLatentRow(c, dtype, c.qk_rope_head_dim);
}

cache::CacheRowSpec MlaLatentRow(const ModelConfig& c, CacheDType dtype, int64_t rope_dims) {
  cache::CacheRowSpec row;
  row.name = "mla.latent";
  row.values = c.kv_lora_rank + rope_dims;
  switch (dtype) {
    case CacheDType::kF32: row.bytes_per_token = 4 * row.values; break;
    case CacheDType::kBF16: row.bytes_per_token = 2 * row.values; break;
    case CacheDType::kFP8:
      // FlashMLA's layout: the latent in e4m3 with a scale per 128 values, the rotary key bf16.
      row.fp8_values = c.kv_lora_rank;
      row.bytes_per_token = cache::Fp8RowBytes(row.values, row.fp8_values);
      break;
  }
  return row;
}

cache::CacheRowSpec DsaIndexKeyRow(const ModelConfig& c, CacheDType dtype) {
  cache::CacheRowSpec row;
  row.name = "dsa.index_k";
  row.values = c.index_head_dim;
  const int64_t d = c.index_head_dim;
  // fp8: DeepSeek V3.2's layout, e4m3 values and one f32 scale per 128 (132 bytes for 128).
  if (dtype == CacheDType::kFP8) row.fp8_values = d;
  row.bytes_per_token = dtype == CacheDType::kF32    ? 4 * d
                        : dtype == CacheDType::kBF16 ? 2 * d
                                                     : cache::Fp8RowBytes(d, d);
  return row;
}

cache::CacheRowSpec KPoolIndexRow(const ModelConfig& c, CacheDType dtype) {
  cache::CacheRowSpec row = DsaIndexKeyRow(c, dtype);
  const int64_t v = 2 * c.index_head_dim;
  row.name = "dsa.kpool";
  row.values = v;
  if (dtype == CacheDType::kFP8) row.fp8_values = v;  // key and gate score, all e4m3
  row.bytes_per_token = dtype == CacheDType::kF32    ? 4 * v
                        : dtype == CacheDType::kBF16 ? 2 * v
                                                     : cache::Fp8RowBytes(v, v);
  return row;
}

std::vector<cache::CacheRowSpec> KdaStateRows(const ModelConfig& c) {
  const ops::KdaDims dims{c.linear_num_heads, c.linear_head_dim, c.linear_conv_kernel};
  auto state = [](const char* name, int64_t values) {
    cache::CacheRowSpec row;
    row.name = name;
    row.retention = cache::Retention::kPerSequence;
    row.values = values;
    row.bytes_per_sequence = 4 * static_cast<uint64_t>(values);
    return row;
  };
  return {state("kda.conv", dims.conv_values()), state("kda.state", dims.state_values()),
          state("kda.block", dims.block_values())};
}

cache::ModelCacheRows KdaHybridRows(const ModelConfig& c, CacheDType dtype) {
  cache::ModelCacheRows rows(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.IsLinearAttentionLayer(l)) {
      rows[l] = KdaStateRows(c);
    } else {
      rows[l].push_back(MlaLatentRow(c, dtype));
    }
  }
  return rows;
}

cache::ModelCacheRows CacheRows(const ModelConfig& config, CacheDType dtype) {
  return ArchOf(config).cache_rows(config, dtype);
}

std::vector<std::vector<int64_t>> CacheRowValues(const ModelConfig& config) {
  const cache::ModelCacheRows rows = CacheRows(config, CacheDType::kF32);
  std::vector<std::vector<int64_t>> values(rows.size());
  for (size_t l = 0; l < rows.size(); ++l) {
    for (const cache::CacheRowSpec& row : rows[l]) values[l].push_back(row.values);
  }
  return values;
}

}  // namespace latent::model
