// Activations: the engine's per-step buffers, sized once at engine start for the largest step,
// so that a step allocates nothing of its size (64 rows of logits of a 129k vocabulary are
// 33 MB, which glibc would map and page-fault anew every step).
#pragma once

#include <cstdint>
#include <vector>

#include "base/error.h"

namespace latent::engine {

class Activations {
 public:
  // Room for `max_rows` rows of `vocab` logits (a step has at most one per sequence).
  void Reserve(int64_t max_rows, int64_t vocab) {
    vocab_ = vocab;
    logits_.assign(static_cast<size_t>(max_rows * vocab), 0.0f);
  }
  // This step's logits, [rows, vocab]. Only a step with prompt logprobs (scoring requests) asks
  // for more rows than reserved: the buffer then grows once to that size, rather than every
  // engine holding max_prompt_logits_rows rows it may never use.
  float* Logits(int64_t rows) {
    if (rows * vocab_ > static_cast<int64_t>(logits_.size())) logits_.resize(static_cast<size_t>(rows * vocab_));
    return logits_.data();
  }

 private:
  int64_t vocab_ = 0;
  std::vector<float> logits_;  // [max_rows, vocab]
};

}  // namespace latent::engine
