// The few fields of a checkpoint's generation_config.json latent honours.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace latent::model {

struct GenerationConfig {
  std::vector<int64_t> eos_token_ids;  // Generation stops after any of these.
  // The one EOS id that ends a sample with no stop_reason: vLLM's tokenizer.eos_token_id, checked
  // before stop_token_ids. vLLM's SamplingParams.update_from_generation_config moves the other
  // eos_token_ids into the request's stop_token_ids (unless ignore_eos), so a sample one of them
  // ends has that id as its stop_reason. nullopt: every EOS id is such a stop id (vLLM without
  // a tokenizer eos). Set by LoadGenerationConfig and SetTokenizerEos.
  std::optional<int64_t> primary_eos_id;

  // Whether `token` ends a sample as one of the extra EOS ids: an EOS id other than the
  // primary one, which vLLM reports as the (int) stop_reason.
  bool IsExtraEos(int64_t token) const;
};

// Reads DIR/generation_config.json when present (eos_token_id: int or list); otherwise falls
// back to config.json's eos ids, as transformers' generate does. primary_eos_id starts as
// config.json's (first) eos_token_id, the stand-in for the tokenizer's until SetTokenizerEos.
GenerationConfig LoadGenerationConfig(const std::string& dir, const ModelConfig& config);

// The tokenizer's EOS, latent's stand-in for vLLM's tokenizer.eos_token_id: the id of
// tokenizer_config.json's eos_token (Kimi's tiktoken tokenizer: its eos_token, else "[EOS]"),
// tokenizer::Tokenizer::eos_id(), of the tokenizer the front loaded (its --tokenizer directory
// where one is given). A front without a tokenizer, or whose tokenizer names no EOS the
// vocabulary holds, passes nullopt and keeps config.json's eos_token_id, which transformers
// checkpoints keep equal to the tokenizer's: so a checkpoint's own EOS ends a sample with a null
// stop_reason there too, where vLLM (no tokenizer eos) would report it as an int.
void SetTokenizerEos(GenerationConfig& generation, std::optional<int32_t> tokenizer_eos);

}  // namespace latent::model
