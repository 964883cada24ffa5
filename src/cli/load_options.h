// The model-loading flags every command that loads a model shares (generate, logits, bench,
// serve; info reports what they would load).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "model/load_options.h"

namespace latent::cli {

inline void AddLoadOptions(CLI::App* sub, std::string& quantize) {
  sub->add_option("--quantize", quantize,
                  "Convert weights at load: none; int8 (linear weights to int8 with a f32 "
                  "scale per output row; embeddings, norms and the router stay as stored); or "
                  "w8a8 (int8's weights, and each linear's input quantized per token to int8 "
                  "for integer dot products, AVX512-VNNI where available)")
      ->capture_default_str();
}

// Throws latent::Error for an unknown --quantize mode.
inline model::LoadOptions ParseLoadOptions(const std::string& quantize) {
  model::LoadOptions options;
  options.quantize = model::ParseWeightQuantization(quantize);
  return options;
}

}  // namespace latent::cli
