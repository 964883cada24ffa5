// `latent generate --prompts FILE.jsonl`: many requests at once through the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "model/load_options.h"

namespace latent::cli {

struct BatchGenerateOptions {
  std::string model_dir;
  std::string tokenizer_dir;  // Defaults to model_dir; needed for text prompts and chat.
  std::string prompts_path;   // JSONL requests; or:
  std::string prompt_text;    // one text prompt (--prompt)
  bool chat = false;          // --prompt is a user message rendered with the chat template
  // --max-tokens: the default for requests that do not say; unset, generation_config.json's
  // max_new_tokens where it has one (as vLLM's LLM takes it), else 16.
  std::optional<int64_t> max_tokens;
  bool ignore_eos = false;    // Default for requests that do not say (--ignore-eos).
  engine::EngineOptions engine;
  model::LoadOptions load;    // --quantize
  std::string debug_replay_path;  // test-only: EngineOptions::debug_replay from this file
};

// Reads the JSONL requests, runs them concurrently, writes JSONL results in input order to
// stdout and a summary to stderr. Returns the exit code.
int RunBatchGenerate(const BatchGenerateOptions& options);

}  // namespace latent::cli
