// `latent generate --model DIR --ids 1,2,3 --max-tokens N [--attention ...]`: greedy
// continuation of one prompt, as JSON {"ids": [...]}. The prompt runs as one chunk, then one
// token per step, reading the cached latent rows. Stops at an EOS id (generation_config.json).
#include <algorithm>
#include <iostream>
#include <memory>

#include "cli/attention_form.h"
#include "cli/commands.h"
#include "cli/token_ids.h"
#include "model/contiguous_latent_cache.h"
#include "model/generation_config.h"
#include "model/mla_attention.h"

namespace latent::cli {

Runner RegisterGenerate(CLI::App& app) {
  struct Options {
    std::string model_dir, ids, attention = "auto";
    int64_t max_tokens = 16;
    bool ignore_eos = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("generate", "Greedy generation for one prompt");
  sub->add_option("--model", opt->model_dir, "Hugging Face checkpoint directory")->required();
  sub->add_option("--ids", opt->ids, "Prompt token ids, e.g. 1,2,3")->required();
  sub->add_option("--max-tokens", opt->max_tokens, "Tokens to generate")->check(CLI::NonNegativeNumber);
  sub->add_option("--attention", opt->attention, "auto, absorbed or expanded");
  sub->add_flag("--ignore-eos", opt->ignore_eos, "Do not stop at EOS");
  return [opt] {
    const model::AttentionForm form = ParseAttentionForm(opt->attention);
    std::vector<int32_t> ids = ParseTokenIds(opt->ids);
    const std::unique_ptr<model::Model> m = model::LoadModel(opt->model_dir);
    const model::GenerationConfig gen = model::LoadGenerationConfig(opt->model_dir, m->config());
    const int64_t vocab = m->config().vocab_size;
    model::ContiguousLatentCache cache(model::MlaDimsOf(m->config()).row());
    std::vector<float> logits(vocab);

    std::vector<int32_t> generated;
    model::ForwardBatch batch;
    batch.token_ids = ids;
    for (size_t i = 0; i < ids.size(); ++i) {
      batch.positions.push_back(static_cast<int64_t>(i));
      batch.seq_slots.push_back(0);
    }
    int64_t next_position = static_cast<int64_t>(ids.size());
    while (static_cast<int64_t>(generated.size()) < opt->max_tokens) {
      batch.logits_rows = {static_cast<int32_t>(batch.token_ids.size() - 1)};
      m->Forward(batch, cache, form, logits.data());
      const int32_t token =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      generated.push_back(token);
      if (!opt->ignore_eos && std::count(gen.eos_token_ids.begin(), gen.eos_token_ids.end(), token)) break;
      batch.token_ids = {token};
      batch.positions = {next_position++};
      batch.seq_slots = {0};
    }
    std::cout << "{\"ids\": [";
    for (size_t i = 0; i < generated.size(); ++i) std::cout << (i ? ", " : "") << generated[i];
    std::cout << "]}\n";
    return 0;
  };
}

}  // namespace latent::cli
