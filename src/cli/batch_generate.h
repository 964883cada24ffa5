// `latent generate --prompts FILE.jsonl`: many requests at once through the engine.
#pragma once

#include <string>

#include "engine/engine.h"

namespace latent::cli {

struct BatchGenerateOptions {
  std::string model_dir;
  std::string prompts_path;
  engine::EngineOptions engine;
};

// Reads the JSONL requests, runs them concurrently, writes JSONL results in input order to
// stdout and a summary to stderr. Returns the exit code.
int RunBatchGenerate(const BatchGenerateOptions& options);

}  // namespace latent::cli
