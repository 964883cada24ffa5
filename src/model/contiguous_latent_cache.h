// The simplest LatentCache: for each (layer, slot), f32 rows of positions 0..n-1 back to back.
// Used for single requests; the engine puts the paged cache behind the same interface.
#pragma once

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "base/error.h"
#include "model/model.h"

namespace latent::model {

class ContiguousLatentCache : public LatentCache {
 public:
  explicit ContiguousLatentCache(int64_t row_floats) : row_floats_(row_floats) {}

  void WriteRow(int64_t layer, int32_t slot, int64_t position, const float* row) override {
    std::vector<float>& rows = rows_[{layer, slot}];
    const size_t needed = static_cast<size_t>((position + 1) * row_floats_);
    if (rows.size() < needed) rows.resize(needed);
    std::copy(row, row + row_floats_, rows.data() + position * row_floats_);
  }
  void GatherRows(int64_t layer, int32_t slot, int64_t count, float* out) const override {
    const std::vector<float>& rows = rows_.at({layer, slot});
    LATENT_CHECK(static_cast<size_t>(count * row_floats_) <= rows.size());
    std::copy(rows.data(), rows.data() + count * row_floats_, out);
  }

 private:
  int64_t row_floats_;
  std::map<std::pair<int64_t, int32_t>, std::vector<float>> rows_;  // (layer, slot) -> [n, row]
};

}  // namespace latent::model
