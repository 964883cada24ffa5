// The speculative-decoding flags of the commands that run the engine (serve, generate, bench).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/validators.h"
#include "engine/engine.h"

namespace latent::cli {

inline void AddSpeculativeOptions(CLI::App* sub, engine::EngineOptions& e) {
  CLI::Option* tokens =
      sub->add_option("--speculative-tokens", e.speculative_tokens,
                      "Speculative decoding by prompt lookup: draft tokens per sequence and step, "
                      "copied from where the sequence's latest tokens occurred before (prompt or "
                      "output) and verified in the same forward; 0: off. The output stays the "
                      "same, bit for bit, with latent's own kernels (LATENT_GEMM=onednn is not "
                      "batch invariant: logprobs may differ in their last bits); it saves time "
                      "where text repeats (code edits, quoted context) and steps have room to "
                      "spare. Models with linear-attention layers refuse it")
          ->capture_default_str()
          ->check(NonNegative(e.speculative_tokens));
  // The lookup's bounds mean nothing without drafts: refused alone rather than ignored.
  sub->add_option("--speculative-ngram-max", e.speculative_ngram_max,
                  "Longest suffix of a sequence looked up for a draft (with --speculative-tokens)")
      ->capture_default_str()
      ->check(Positive(e.speculative_ngram_max))
      ->needs(tokens);
  sub->add_option("--speculative-ngram-min", e.speculative_ngram_min,
                  "Shortest suffix of a sequence looked up for a draft (with --speculative-tokens)")
      ->capture_default_str()
      ->check(Positive(e.speculative_ngram_min))
      ->needs(tokens);
}

}  // namespace latent::cli
