// The model-loading flags every command that loads a model shares (generate, logits, bench,
// serve; info reports what they would load).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "model/load_options.h"

namespace latent::cli {

// The flags' text, parsed by ParseLoadOptions.
struct LoadFlags {
  std::string quantize = "none";
  std::string precision = "auto";
};

inline void AddLoadOptions(CLI::App* sub, LoadFlags& flags) {
  std::string& quantize = flags.quantize;
  sub->add_option("--quantize", quantize,
                  "Convert weights at load: none; int8 (linear weights to int8 with a f32 "
                  "scale per output row; embeddings, norms and the router stay as stored); or "
                  "w8a8 (int8's weights, and each linear's input quantized per token to int8 "
                  "for integer dot products, AVX512-VNNI where available)")
      ->capture_default_str();
  sub->add_option("--precision", flags.precision,
                  "Arithmetic of the linears: bf16 (activations rounded to bf16 at each linear's "
                  "input, f32 accumulation, as vLLM and llama.cpp run bf16 checkpoints); f32 (every product in f32: transformers' f32 forward); or "
                  "auto (bf16 for bf16 and fp8 checkpoints, f32 for f32 ones)")
      ->capture_default_str();
}

// Throws latent::Error for an unknown --quantize mode or --precision.
inline model::LoadOptions ParseLoadOptions(const LoadFlags& flags) {
  model::LoadOptions options;
  options.quantize = model::ParseWeightQuantization(flags.quantize);
  options.precision = model::ParsePrecision(flags.precision);
  return options;
}

}  // namespace latent::cli
