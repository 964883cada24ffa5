// `latent generate --model DIR --ids 1,2,3 --max-tokens N [--attention ...]`: greedy
// continuation of one prompt, as JSON {"ids": [...]}, computed directly on the model (no
// engine): the prompt as one chunk, then one token per step. It is the "alone" reference that
// batched runs are tested against. Stops at an EOS id (generation_config.json).
// Raw greedy on purpose: the argmax of the model's logits, with none of generation_config.json's
// sampling defaults (temperature, top_k, top_p, min_p, repetition_penalty) nor its
// max_new_tokens, which --prompt, --prompts, the server and latent.LLM apply. A reference must
// not move when a checkpoint's file changes, and it has no sampler or seed to honour them with.
// `latent generate --model DIR --prompts FILE.jsonl [engine flags]`: many requests at once
// through the engine (batch_generate.cc).
#include <algorithm>
#include <iostream>
#include <memory>

#include "engine/distributed_model.h"
#include "generate/attention_form.h"
#include "cli/batch_generate.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "cli/load_options.h"
#include "cli/speculative_options.h"
#include "cli/token_ids.h"
#include "base/saturating.h"
#include "engine/cache_manager.h"
#include "engine/sampler.h"
#include "model/generation_config.h"
#include "model/cache_rows.h"

namespace latent::cli {

namespace {

Runner RegisterGenerate(CLI::App& app) {
  struct Options {
    std::string model_dir, ids, attention = "auto";
    int64_t max_tokens = 16;
    bool ignore_eos = false;
    std::string prompts, prompt, tokenizer;
    bool chat = false;
    engine::EngineOptions engine;
    bool no_prefix_cache = false;
    std::string debug_replay_path;
    LoadFlags load_flags;  // --quantize, --precision
  };
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "generate", "Generate from --ids (raw greedy, on the model alone) or through the engine");
  sub->add_option("--model", opt->model_dir, "Hugging Face checkpoint directory")->required();
  auto* ids = sub->add_option(
      "--ids", opt->ids,
      "One prompt's token ids, e.g. 1,2,3, decoded raw greedy (argmax) without the engine: "
      "generation_config.json's sampling defaults and max_new_tokens do not apply");
  auto* prompts = sub->add_option("--prompts", opt->prompts, "JSONL requests run through the engine");
  auto* prompt = sub->add_option("--prompt", opt->prompt, "One text prompt, run through the engine");
  ids->excludes(prompts)->excludes(prompt);
  prompts->excludes(prompt);
  auto* chat = sub->add_flag("--chat", opt->chat,
                             "With --prompt: a user message, rendered by the chat template");
  auto* tokenizer =
      sub->add_option("--tokenizer", opt->tokenizer, "Tokenizer directory (default: --model)");
  auto* budget = sub->add_option("--max-batch-tokens", opt->engine.max_batch_tokens,
                                 "Token budget per step")
                     ->check(Positive(opt->engine.max_batch_tokens));
  auto* seqs = sub->add_option("--max-seqs", opt->engine.max_seqs, "Sequences per step at most")
                   ->check(Positive(opt->engine.max_seqs));
  sub->add_option("--block-tokens", opt->engine.block_tokens, "Tokens per cache block")
      ->check(Positive(opt->engine.block_tokens));
  auto* blocks = sub->add_option("--num-blocks", opt->engine.num_blocks,
                                 "Cache blocks (default: from --cache-memory)")
                     ->check(Positive(opt->engine.num_blocks));
  auto* memory =
      sub->add_option("--cache-memory", opt->engine.cache_memory_gib, "Cache size in GiB")
          ->check(Positive(opt->engine.cache_memory_gib));
  sub->add_option("--cache-dtype", opt->engine.cache_dtype, "auto, f32, bf16 or fp8 (FlashMLA's e4m3 latent rows)");
  auto* no_prefix = sub->add_flag("--no-prefix-cache", opt->no_prefix_cache,
                                  "Do not reuse cached prompt blocks");
  AddSpeculativeOptions(sub, opt->engine);
  auto* invariants = sub->add_flag("--check-invariants", opt->engine.check_invariants,
                                   "Verify block accounting after every step");
  // --ids decodes one sequence without the engine or a tokenizer: refuse what it would ignore.
  for (CLI::Option* engine_only :
       {chat, tokenizer, budget, seqs, blocks, memory, no_prefix, invariants}) {
    ids->excludes(engine_only);
  }
  chat->excludes(prompts);  // --chat renders --prompt's text; --prompts lines say it themselves
  CLI::Option* max_tokens =
      sub->add_option("--max-tokens", opt->max_tokens,
                      "Tokens to generate (with --prompts: for lines without their own "
                      "\"max_tokens\"; unset, generation_config.json's max_new_tokens, else 16; "
                      "with --ids: 16 unset)")
          ->check(NonNegative(opt->max_tokens));
  sub->add_option("--attention", opt->attention, "auto, absorbed or expanded");
  sub->add_flag("--ignore-eos", opt->ignore_eos,
                "Do not stop at EOS (with --prompts: for lines without their own \"ignore_eos\")");
  sub->add_option("--debug-replay", opt->debug_replay_path,
                  "TEST-ONLY, with --prompts or --prompt: every request emits the token ids "
                  "in FILE (as latent serve's --debug-replay) instead of sampling")
      ->option_text("FILE");
  AddLoadOptions(sub, opt->load_flags);
  return [opt, max_tokens, prompt, prompts] {
    const model::AttentionForm form = generate::ParseAttentionForm(opt->attention);
    const model::LoadOptions load = ParseLoadOptions(opt->load_flags);
    if (prompt->count() > 0 && opt->prompt.empty()) Fail("--prompt is empty: give it the text");
    if (prompts->count() > 0 && opt->prompts.empty()) Fail("--prompts is empty: give it a file");
    if (!opt->prompts.empty() || !opt->prompt.empty()) {
      BatchGenerateOptions batch;
      batch.model_dir = opt->model_dir;
      batch.tokenizer_dir = opt->tokenizer;
      batch.prompts_path = opt->prompts;
      batch.prompt_text = opt->prompt;
      batch.chat = opt->chat;
      if (max_tokens->count() > 0) batch.max_tokens = opt->max_tokens;
      batch.ignore_eos = opt->ignore_eos;
      batch.engine = opt->engine;
      batch.load = load;
      batch.engine.attention = form;
      batch.engine.prefix_caching = !opt->no_prefix_cache;
      batch.debug_replay_path = opt->debug_replay_path;
      return RunBatchGenerate(batch);
    }
    if (opt->ids.empty()) Fail("generate needs --ids, --prompt or --prompts");
    // --ids runs one sequence without the engine (the reference the engine's batches compare
    // against): the engine's options would do nothing there.
    if (opt->engine.speculative_tokens > 0 || !opt->debug_replay_path.empty()) {
      Fail("--speculative-tokens and --debug-replay need --prompts or --prompt (the engine); "
           "--ids decodes one sequence without it");
    }
    std::vector<int32_t> ids = ParseTokenIds(opt->ids);
    const std::unique_ptr<model::Model> m = engine::LoadRankedModel(opt->model_dir, load);
    const model::GenerationConfig gen = model::LoadGenerationConfig(opt->model_dir, m->config());
    const int64_t vocab = m->config().vocab_size;
    // Rows in --cache-dtype, as the engine stores them ("auto": f32 for f32 checkpoints, bf16
    // otherwise), so that batched runs compare bit for bit against this; in blocks enough for the
    // prompt and every generated token.
    engine::CacheOptions cache_options;
    cache_options.block_tokens = opt->engine.block_tokens;
    const int64_t most = SaturatingAdd(static_cast<int64_t>(ids.size()), opt->max_tokens);
    if (most > m->config().max_position_embeddings) {  // as the engine refuses a request
      Fail("prompt (", ids.size(), " tokens) + --max-tokens (", opt->max_tokens,
           ") exceeds the model's max_position_embeddings (", m->config().max_position_embeddings,
           ")");
    }
    cache_options.prefix_caching = false;
    cache_options.dtype = model::ParseCacheDType(opt->engine.cache_dtype, m->config());
    cache_options.num_blocks = engine::CacheManager::BlocksToHold(m->config(), cache_options, most);
    engine::CacheManager cache(m->config(), cache_options);
    cache::BlockTable table = cache.NewTable();
    cache::BlockTable window_table = cache.NewWindowTable();  // sliding-window rows, if any
    std::vector<float> logits(vocab);

    std::vector<int32_t> generated;
    model::ForwardBatch batch;
    batch.rows = &cache.rows();
    std::vector<int32_t> step = ids;  // This step's tokens: the prompt, then the last token.
    int64_t position = 0;
    while (static_cast<int64_t>(generated.size()) < opt->max_tokens) {
      const int64_t end = position + static_cast<int64_t>(step.size());
      if (!table.Grow(cache.pool(), end) || (cache.has_window() && !window_table.Grow(cache.pool(), end))) {
        FailInternal("generate's cache is too small");
      }
      batch.Clear();
      batch.AddSequence(step, position, table.blocks(),
                        model::ExpandedPositions(m->config(), form, static_cast<int64_t>(ids.size())),
                        /*last_logits=*/true);
      if (cache.has_window()) batch.AddWindowTable(window_table.blocks());
      m->Forward(batch, form, logits.data());
      position += static_cast<int64_t>(step.size());
      // The argmax of a row holding NaN is whatever max_element's comparisons make of it (token
      // 0, often): refused as the engine refuses to draw from it.
      if (engine::HasNanOrPosInf(logits.data(), vocab)) Fail(engine::kNonFiniteLogitsError);
      const int32_t token =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      generated.push_back(token);
      if (!opt->ignore_eos && std::count(gen.eos_token_ids.begin(), gen.eos_token_ids.end(), token))
        break;
      step = {token};
    }
    table.Free(cache.pool());
    window_table.Free(cache.pool());
    std::cout << "{\"ids\": [";
    for (size_t i = 0; i < generated.size(); ++i) std::cout << (i ? ", " : "") << generated[i];
    std::cout << "]}\n";
    return 0;
  };
}

}  // namespace

LATENT_COMMAND(20, RegisterGenerate);

}  // namespace latent::cli
