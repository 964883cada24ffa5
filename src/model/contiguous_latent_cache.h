// The simplest LatentCache: for each (layer, row, slot), f32 values of positions 0..n-1 back
// to back. Used for single requests; the engine puts the paged cache behind the same interface.
#pragma once

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "model/model.h"

namespace latent::model {

class ContiguousLatentCache : public LatentCache {
 public:
  // values[layer][row]: values per token of each row of each layer (model::CacheRowValues).
  explicit ContiguousLatentCache(std::vector<std::vector<int64_t>> values) : values_(std::move(values)) {}

  void WriteRow(int64_t layer, int row, int32_t slot, int64_t position, const float* values) override {
    const int64_t width = values_.at(layer).at(row);
    std::vector<float>& rows = rows_[{layer, row, slot}];
    const size_t needed = static_cast<size_t>((position + 1) * width);
    if (rows.size() < needed) rows.resize(needed);
    std::copy(values, values + width, rows.data() + position * width);
  }
  void GatherRows(int64_t layer, int row, int32_t slot, int64_t count, float* out) const override {
    const int64_t width = values_.at(layer).at(row);
    const std::vector<float>& rows = rows_.at({layer, row, slot});
    LATENT_CHECK(static_cast<size_t>(count * width) <= rows.size());
    std::copy(rows.data(), rows.data() + count * width, out);
  }
  void GatherPositions(int64_t layer, int row, int32_t slot, std::span<const int32_t> positions,
                       float* out) const override {
    const int64_t width = values_.at(layer).at(row);
    const std::vector<float>& rows = rows_.at({layer, row, slot});
    for (size_t i = 0; i < positions.size(); ++i) {
      LATENT_CHECK(static_cast<size_t>((positions[i] + 1) * width) <= rows.size());
      std::copy_n(rows.data() + positions[i] * width, width, out + i * width);
    }
  }

 private:
  std::vector<std::vector<int64_t>> values_;
  std::map<std::tuple<int64_t, int, int32_t>, std::vector<float>> rows_;
};

}  // namespace latent::model
