// The few fields of a checkpoint's generation_config.json latent honours.
#pragma once

#include <string>
#include <vector>

#include "model/model_config.h"

namespace latent::model {

struct GenerationConfig {
  std::vector<int64_t> eos_token_ids;  // Generation stops after any of these.
};

// Reads DIR/generation_config.json when present (eos_token_id: int or list); otherwise falls
// back to config.json's eos ids, as transformers' generate does.
GenerationConfig LoadGenerationConfig(const std::string& dir, const ModelConfig& config);

}  // namespace latent::model
