// A stateless fake model for engine tests whose logits favour one token chosen by the row's own
// token and position, so a test scripts what greedy (or seeded) sampling draws without reading
// the cache. The plain form is one-hot: every logit 0 but the favoured token's.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "fake_cache_model.h"
#include "model/model.h"

namespace latent::engine::testing {

class FavouredTokenModel : public model::Model {
 public:
  // The token favoured in the logits row of token `last` at `position` (what follows it).
  using Favoured = std::function<int32_t(int32_t last, int64_t position)>;
  // Token v's logit in the row of token `last`, where it is not the favoured one.
  using Background = std::function<float(int64_t v, int32_t last)>;

  // `background` empty: 0 (one-hot logits).
  FavouredTokenModel(int64_t vocab, Favoured favoured, float favoured_logit = 5.0f,
                     Background background = {})
      : c_(FakeMlaConfig(vocab)),
        favoured_(std::move(favoured)),
        favoured_logit_(favoured_logit),
        background_(std::move(background)) {}

  const model::ModelConfig& config() const override { return c_; }

  void Forward(const model::ForwardBatch& batch, model::AttentionForm, float* logits,
               model::ForwardTrace*) const override {
    for (size_t r = 0; r < batch.logits_rows.size(); ++r) {
      const int32_t t = batch.logits_rows[r];
      const int32_t last = batch.token_ids[t];
      float* out = logits + r * c_.vocab_size;  // [vocab]
      for (int64_t v = 0; v < c_.vocab_size; ++v) {
        out[v] = background_ ? background_(v, last) : 0.0f;
      }
      out[favoured_(last, batch.positions[t])] = favoured_logit_;
    }
  }

 private:
  model::ModelConfig c_;
  Favoured favoured_;
  float favoured_logit_;
  Background background_;
};

}  // namespace latent::engine::testing
