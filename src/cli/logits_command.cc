// `latent logits --model DIR --ids 1,2,3 [--attention auto|absorbed|expanded]
// [--quantize none|int8|w8a8] [--cache-dtype f32|bf16|fp8] [--f32-out PATH]`: f32 logits of every position of one prompt, as JSON
// {"logits": [[...], ...]}; with --f32-out, as raw little-endian f32 [tokens, vocab] in PATH
// (large vocabularies), the JSON then giving "tokens" and "vocab" instead. JSON has no NaN or
// infinity: a non-finite logit (an overflow in the model) fails the JSON form with the engine's
// message and the first position and token holding one; --f32-out writes them as they are.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/distributed_model.h"
#include "generate/attention_form.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "cli/load_options.h"
#include "cli/token_ids.h"
#include "cache/cache_layout.h"
#include "engine/cache_manager.h"
#include "engine/sampler.h"
#include "model/cache_rows.h"

namespace latent::cli {

namespace {

// The prompt in chunks of `chunk` tokens through a paged cache of `dtype` rows, as chunked
// prefill runs it; logits of every position. One chunk with f32 rows is the plain forward pass.
void RunPrompt(const model::Model& m, const std::vector<int32_t>& ids, int64_t chunk,
               uint32_t block_tokens, model::CacheDType dtype, model::AttentionForm form,
               float* logits, model::ForwardTrace* trace) {
  const model::ModelConfig& config = m.config();
  const int64_t n = static_cast<int64_t>(ids.size());
  engine::CacheOptions options;
  options.block_tokens = block_tokens;
  options.prefix_caching = false;
  options.dtype = dtype;
  options.num_blocks = engine::CacheManager::BlocksToHold(config, options, n);
  engine::CacheManager cache(config, options);
  cache::BlockTable table = cache.NewTable();
  cache::BlockTable window_table = cache.NewWindowTable();  // sliding-window rows, if any
  model::ForwardBatch batch;
  batch.rows = &cache.rows();
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t end = std::min(n, start + chunk);
    if (!table.Grow(cache.pool(), end) || (cache.has_window() && !window_table.Grow(cache.pool(), end))) {
      FailInternal("chunked cache too small");
    }
    batch.Clear();
    batch.AddSequence(std::span<const int32_t>(ids).subspan(start, end - start), start,
                      table.blocks(), model::ExpandedPositions(config, form, n),
                      /*last_logits=*/true, /*all_logits=*/true);
    if (cache.has_window()) batch.AddWindowTable(window_table.blocks());
    batch.prompt_lens.push_back(n);  // Chunks of one prompt: its rotary frequencies as a whole.
    m.Forward(batch, form, logits + start * config.vocab_size, trace);
  }
  table.Free(cache.pool());
  window_table.Free(cache.pool());
}

// JSON cannot hold NaN or inf ("nan" would make the output unreadable to every JSON parser), and
// null would pass for a value a consumer then computes with: the first non-finite logit fails.
void FailOnNonFiniteLogits(const std::vector<float>& logits, int64_t vocab) {
  const auto bad =
      std::find_if(logits.begin(), logits.end(), [](float x) { return !std::isfinite(x); });
  if (bad == logits.end()) return;
  const int64_t at = bad - logits.begin();
  Fail(engine::kNonFiniteLogitsError, ": position ", at / vocab, ", token ", at % vocab, " is ",
       *bad, " (--f32-out writes the logits as they are)");
}

Runner RegisterLogits(CLI::App& app) {
  struct Options {
    std::string model_dir, ids, attention = "auto";
    bool experts = false;
    bool selected = false;
    int64_t chunk_tokens = 0;
    uint32_t block_tokens = cache::kDefaultBlockTokens;  // as the engine's
    std::string cache_dtype = "auto";
    LoadFlags load_flags;  // --quantize, --precision
    std::string f32_out;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("logits", "Print the logits of every position of a prompt");
  sub->add_option("--model", opt->model_dir, "Hugging Face checkpoint directory")->required();
  sub->add_option("--ids", opt->ids, "Prompt token ids, e.g. 1,2,3")->required();
  sub->add_option("--attention", opt->attention, "auto, absorbed or expanded");
  auto* experts = sub->add_flag(
      "--experts", opt->experts,
      "Also print the routed experts of every MoE layer and token (\"experts\"; one chunk only)");
  sub->add_flag(
      "--selected", opt->selected,
      "Also print the key positions DSA selected per layer and token (\"selected\"; [] where "
      "the token attended densely; one chunk only)");
  auto* chunks =
      sub->add_option("--chunk-tokens", opt->chunk_tokens,
                      "Run the prompt in chunks of N tokens through the paged cache in "
                      "--cache-dtype (0: one chunk, f32 rows unless --cache-dtype names f32, "
                      "bf16 or fp8)")
          ->check(NonNegative(opt->chunk_tokens));
  sub->add_option("--block-tokens", opt->block_tokens, "Paged cache block size")
      ->capture_default_str()
      ->check(Positive(opt->block_tokens));
  sub->add_option("--cache-dtype", opt->cache_dtype, "Paged cache rows: auto, f32, bf16 or fp8 (FlashMLA's e4m3 latent rows)");
  AddLoadOptions(sub, opt->load_flags);
  sub->add_option("--f32-out", opt->f32_out,
                  "Write the logits as raw little-endian f32 [tokens, vocab] to this file");
  return [opt, experts, chunks] {
    // The trace is of one forward: chunks would print "experts": [] (an empty trace), not the
    // routing of the chunked run.
    if (opt->chunk_tokens > 0 && (opt->experts || opt->selected)) {
      Fail(experts->count() > 0 ? "--experts" : "--selected", " traces the prompt as one chunk: ",
           "leave out ", chunks->get_name(), " (", opt->chunk_tokens, ")");
    }
    const model::AttentionForm form = generate::ParseAttentionForm(opt->attention);
    const model::LoadOptions load = ParseLoadOptions(opt->load_flags);
    const std::vector<int32_t> ids = ParseTokenIds(opt->ids);
    const std::unique_ptr<model::Model> m = engine::LoadRankedModel(opt->model_dir, load);
    const int64_t vocab = m->config().vocab_size;

    std::vector<float> logits(ids.size() * vocab);
    model::ForwardTrace trace;
    if (opt->chunk_tokens == 0) {
      // One chunk, rows kept in f32 (exact) unless --cache-dtype names a dtype ("auto" keeps f32
      // here: the parity tests' reference is the exact forward pass).
      const model::CacheDType dtype = opt->cache_dtype == "auto" ? model::CacheDType::kF32
                                      : model::ParseCacheDType(opt->cache_dtype, m->config());
      RunPrompt(*m, ids, static_cast<int64_t>(ids.size()), opt->block_tokens, dtype, form,
                logits.data(), opt->experts || opt->selected ? &trace : nullptr);
    } else {
      RunPrompt(*m, ids, opt->chunk_tokens, opt->block_tokens,
                model::ParseCacheDType(opt->cache_dtype, m->config()), form, logits.data(), nullptr);
    }

    std::string out;
    if (!opt->f32_out.empty()) {
      std::FILE* f = std::fopen(opt->f32_out.c_str(), "wb");
      if (f == nullptr) Fail("--f32-out: cannot write ", opt->f32_out);
      const size_t written = std::fwrite(logits.data(), sizeof(float), logits.size(), f);
      if (std::fclose(f) != 0 || written != logits.size()) Fail("--f32-out: cannot write ", opt->f32_out);
      out = "{\"tokens\": " + std::to_string(ids.size()) + ", \"vocab\": " + std::to_string(vocab);
    } else {
      FailOnNonFiniteLogits(logits, vocab);
      // %.9g prints every f32 exactly enough to round-trip.
      out = "{\"logits\": [";
      char buf[32];
      for (size_t i = 0; i < ids.size(); ++i) {
        out += i ? ", [" : "[";
        for (int64_t v = 0; v < vocab; ++v) {
          std::snprintf(buf, sizeof buf, v ? ", %.9g" : "%.9g", logits[i * vocab + v]);
          out += buf;
        }
        out += "]";
      }
      out += "]";
    }
    if (opt->experts) {
      // "experts": per layer (null for dense ones), per token, the chosen expert ids.
      const int64_t k = m->config().num_experts_per_tok;
      out += ", \"experts\": [";
      for (size_t l = 0; l < trace.experts.size(); ++l) {
        out += l ? ", " : "";
        if (trace.experts[l].empty()) {
          out += "null";
          continue;
        }
        out += "[";
        for (size_t t = 0; t < ids.size(); ++t) {
          out += t ? ", [" : "[";
          for (int64_t j = 0; j < k; ++j) out += (j ? ", " : "") + std::to_string(trace.experts[l][t * k + j]);
          out += "]";
        }
        out += "]";
      }
      out += "]";
    }
    if (opt->selected) {
      out += ", \"selected\": " + nlohmann::json(trace.selected).dump();
    }
    out += "}\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  };
}

}  // namespace

LATENT_COMMAND(30, RegisterLogits);

}  // namespace latent::cli
