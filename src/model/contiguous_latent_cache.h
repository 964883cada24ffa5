// The simplest LatentCache: for each (layer, slot), the rows of positions 0..n-1 back to back.
// Enough for single requests; the engine puts the paged cache behind the same interface.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "model/model.h"

namespace latent::model {

class ContiguousLatentCache : public LatentCache {
 public:
  explicit ContiguousLatentCache(int64_t row_floats) : row_floats_(row_floats) {}

  float* MutableRow(int64_t layer, int32_t slot, int64_t position) override {
    std::vector<float>& rows = rows_[{layer, slot}];
    const size_t needed = static_cast<size_t>((position + 1) * row_floats_);
    if (rows.size() < needed) rows.resize(needed);
    return rows.data() + position * row_floats_;
  }
  const float* Row(int64_t layer, int32_t slot, int64_t position) const override {
    const std::vector<float>& rows = rows_.at({layer, slot});
    LATENT_CHECK(static_cast<size_t>((position + 1) * row_floats_) <= rows.size());
    return rows.data() + position * row_floats_;
  }
  // Forgets the rows of `slot` in every layer.
  void Release(int32_t slot) {
    for (auto it = rows_.begin(); it != rows_.end();)
      it = it->first.second == slot ? rows_.erase(it) : std::next(it);
  }

 private:
  int64_t row_floats_;
  std::map<std::pair<int64_t, int32_t>, std::vector<float>> rows_;  // (layer, slot) -> [n, row]
};

}  // namespace latent::model
