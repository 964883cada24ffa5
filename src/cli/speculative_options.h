// The speculative-decoding flags of the commands that run the engine (serve, generate, bench).
#pragma once

#include <CLI/CLI.hpp>

#include "engine/engine.h"

namespace latent::cli {

inline void AddSpeculativeOptions(CLI::App* sub, engine::EngineOptions& e) {
  sub->add_option("--speculative-tokens", e.speculative_tokens,
                  "Speculative decoding by prompt lookup: draft tokens per sequence and step, "
                  "copied from where the sequence's latest tokens occurred before (prompt or "
                  "output) and verified in the same forward; 0: off. The output stays the same, "
                  "bit for bit; it saves time where text repeats (code edits, quoted context) "
                  "and steps have room to spare. Models with linear-attention layers refuse it")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--speculative-ngram-max", e.speculative_ngram_max,
                  "Longest suffix of a sequence looked up for a draft")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--speculative-ngram-min", e.speculative_ngram_min,
                  "Shortest suffix of a sequence looked up for a draft")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

}  // namespace latent::cli
