// The few fields of a checkpoint's generation_config.json latent honours, and the tokenizer's EOS.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace latent::model {

// generation_config.json's sampling fields, which vLLM takes as the defaults of the fields a
// request leaves out: LLM.generate/chat with sampling_params=None (get_default_sampling_params)
// and, under `vllm serve`'s default --generation-config auto, every OpenAI request
// (default_sampling_params; max_new_tokens is the default max_tokens of a chat completion).
// Those are ModelConfig.get_diff_sampling_param's fields: each of these the file sets. Absent or
// null: unset. latent takes every field the file sets, which is what vLLM takes under
// transformers 5; under transformers 4, GenerationConfig.to_diff_dict drops a value equal to
// transformers' own default (top_k 50, temperature 1.0, top_p 1.0, repetition_penalty 1.0), so
// vLLM there would leave a file's top_k 50 unapplied.
struct SamplingDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;

  // The fields that are set, under vLLM's SamplingParams and the request fields' names
  // (max_new_tokens as "max_tokens"): what every front merges into the requests that omit them.
  nlohmann::json AsFields() const;

  // The one range check of these fields, so that `latent serve`, `latent generate` and
  // latent.LLM refuse the same files: temperature >= 0, top_p in (0, 1], top_k -1 (off, made 0)
  // or more (past int32: made int32's most, as the server reads a request's), min_p in [0, 1],
  // repetition_penalty in [0.01, 100], each a 32-bit float; max_new_tokens at least 1 (0 would
  // make every default request generate nothing). latent::Error naming `path`, the field and the
  // value otherwise. LoadGenerationConfig and LoadSamplingDefaults run it.
  void Check(const std::string& path);
};

struct GenerationConfig {
  // generation_config.json's eos_token_id (config.json's when that file is absent). Each ends a
  // sample unless ignore_eos; vLLM's SamplingParams.update_from_generation_config moves those
  // other than the primary one into the request's stop_token_ids, so a sample one of them ends
  // has that id as its (int) stop_reason.
  std::vector<int64_t> eos_token_ids;
  // vLLM's tokenizer.eos_token_id (request.eos_token_id), set by SetTokenizerEos: it ends a
  // sample unless ignore_eos, with no stop_reason, whether or not eos_token_ids lists it (Kimi
  // K2's tokenizer ends on [EOS], its generation_config.json lists another id). nullopt without
  // a tokenizer or when it names no EOS: then every EOS id is an extra one, as in vLLM.
  std::optional<int64_t> primary_eos_id;
  // Only from generation_config.json (vLLM also reads config.json's when that file is absent,
  // where transformers 4 wrote its own defaults; latent does not).
  SamplingDefaults sampling;

  // Whether `token` ends a sample as one of the extra EOS ids: an EOS id other than the
  // primary one, which vLLM reports as the (int) stop_reason.
  bool IsExtraEos(int64_t token) const;
  // Every id that ends a sample unless ignore_eos, and that min_tokens holds off: eos_token_ids
  // and the primary EOS, those in [0, vocab_size), each once.
  std::vector<int32_t> EndIds(int64_t vocab_size) const;
};

// Reads DIR/generation_config.json when present, and then only its eos_token_id (int or list;
// missing or null: none) and sampling fields (a number each, top_k and max_new_tokens integers, in
// the ranges of SamplingDefaults::Check: latent::Error naming the file and field otherwise), as
// vLLM (transformers' GenerationConfig.from_pretrained) does; without that file, config.json's
// eos ids (vLLM's GenerationConfig.from_model_config). So a generation_config.json without
// eos_token_id leaves the tokenizer's EOS the only one. No primary EOS until SetTokenizerEos.
GenerationConfig LoadGenerationConfig(const std::string& dir, const ModelConfig& config);

// Only the sampling fields of DIR/generation_config.json (none without the file), read and checked
// as LoadGenerationConfig reads them: every front calls it before it loads the weights, so a bad
// field is named at once, whatever the state of the rest of the checkpoint.
SamplingDefaults LoadSamplingDefaults(const std::string& dir);

// The tokenizer's EOS, latent's stand-in for vLLM's tokenizer.eos_token_id: the id of
// tokenizer_config.json's eos_token (Kimi's tiktoken tokenizer: its eos_token, else "[EOS]"),
// tokenizer::Tokenizer::eos_id(), of the tokenizer the front loaded (its --tokenizer directory
// where one is given). A front without a tokenizer, or whose tokenizer names no EOS the
// vocabulary holds, passes nullopt: no primary EOS, so every EOS id ends a sample with its id as
// the stop_reason, as vLLM without a tokenizer eos.
void SetTokenizerEos(GenerationConfig& generation, std::optional<int32_t> tokenizer_eos);

}  // namespace latent::model
