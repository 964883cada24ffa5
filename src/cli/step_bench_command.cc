// `latent bench-step --model DIR --context 16384,32768 [--attention absorbed,expanded] [--batch
// 1,8]`: the time of one decode step at long context, without the prefill that would reach it.
//
// A decode step's cost depends on how many cached rows it reads, not on their values, so the
// paged cache (the engine's storage, block tables and row dtype) is filled with random rows for
// positions [0, L) of each of B sequences (B = --batch: concurrent requests, each at context L)
// and the model then decodes one untimed warm-up token per sequence at position L and `--steps`
// timed ones after it, all B in one step, through the same Forward the engine calls. For DSA models
// the indexer's key rows are random too: top-k still scans every position and keeps index_topk of
// them. This is how the long-context ratios of docs/performance.md are measured (absorbed vs
// expanded at 16k, DSA vs dense at 32k), where a real 16k-32k prefill on 2 cores would take most of
// the benchmark's budget.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "engine/distributed_model.h"
#include "base/error.h"
#include "base/error_context.h"
#include "base/saturating.h"
#include "cache/block_table.h"
#include "cache/cache_storage.h"
#include "generate/attention_form.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "cli/load_options.h"
#include "engine/cache_manager.h"
#include "kernels/kernel_table.h"
#include "model/cache_rows.h"
#include "threads/thread_pool.h"

namespace latent::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Sequences one timed step may hold: each has its block tables and a logits row (a vocabulary of
// floats), so a typo's billions would end in bad_alloc rather than a message.
constexpr int64_t kMaxStepBatch = 4096;

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) items.push_back(item);
  return items;
}

int64_t ParsePositive(const std::string& item, const char* flag) {
  try {
    size_t used = 0;
    const int64_t v = std::stoll(item, &used);
    if (used == item.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  Fail(flag, ": '", item, "' is not a positive integer");
}

struct StepResult {
  std::vector<double> step_ms;  // One per decoded token.
  // [steps][batch] each timed step's greedy token per sequence: what the model made of the rows,
  // the same under any number of ranks.
  std::vector<std::vector<int32_t>> argmax;
};

StepResult RunContext(const model::Model& m, int64_t context, int64_t batch, int64_t steps,
                      model::AttentionForm form, uint32_t block_tokens, model::CacheDType dtype,
                      uint64_t seed) {
  const model::ModelConfig& config = m.config();
  const int64_t tokens = context + steps + 1;  // One untimed warm-up step first.
  const int64_t per_sequence = (tokens + block_tokens - 1) / block_tokens;
  // Window rows (sliding-window layers) sit in blocks of their own, addressed by a second table
  // per sequence; the bench keeps every position's (nothing is released between its steps).
  // int64, saturating: --batch 1500000000 used to wrap the int32 count into a bad_alloc.
  int64_t num_blocks = SaturatingMul(per_sequence, batch);
  {
    engine::CacheOptions probe;
    probe.block_tokens = block_tokens;
    probe.num_blocks = 1;
    probe.dtype = dtype;
    probe.state_slots = 1;
    const engine::CacheManager sizing(config, probe);
    if (sizing.has_window()) {
      const uint32_t w = sizing.window_block_tokens();
      num_blocks = SaturatingAdd(num_blocks, SaturatingMul((tokens + w - 1) / w, batch));
    }
  }
  if (num_blocks > INT32_MAX) {
    Fail("--context ", context, " with --batch ", batch, " needs ", num_blocks,
         " cache blocks of ", block_tokens, " tokens, more than a cache holds (", INT32_MAX,
         "): lower --context or --batch, or raise --block-tokens");
  }
  engine::CacheOptions options;
  options.block_tokens = block_tokens;
  options.num_blocks = static_cast<int32_t>(num_blocks);
  options.prefix_caching = false;
  options.dtype = dtype;
  options.state_slots = static_cast<int32_t>(batch);  // hybrid models: one state per sequence
  std::optional<engine::CacheManager> made;
  try {
    made.emplace(config, options);
  } catch (const cache::CacheTooLarge& e) {
    // The cache's own advice names the engine's flags, which bench-step has not.
    Fail("--context ", context, " with --batch ", batch, ": ", e.shortfall(),
         ": lower --context or --batch");
  } catch (const Error& e) {
    FailLike(e, "--context ", context, " with --batch ", batch, ": ", e.what());
  }
  engine::CacheManager& cache = *made;
  std::vector<cache::BlockTable> tables(batch, cache.NewTable());  // table i: sequence i
  for (cache::BlockTable& table : tables) LATENT_CHECK(table.Grow(cache.pool(), tokens));
  std::vector<cache::BlockTable> window_tables;  // window_tables[i]: sequence i's window rows
  if (cache.has_window()) {
    window_tables.assign(batch, cache.NewWindowTable());
    for (cache::BlockTable& table : window_tables) LATENT_CHECK(table.Grow(cache.pool(), tokens));
  }
  const cache::PagedRows& rows = cache.rows();
  // The table that holds row `row` of `layer` for sequence `slot` (its retention group's).
  const auto table_of = [&](int32_t slot, int64_t layer, int row) {
    return rows.Group(layer, row) == 0 ? tables[slot].blocks() : window_tables[slot].blocks();
  };

  // Random rows, N(0, 1): the scale of a normalized latent and of a rotated key.
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values;
  const std::vector<std::vector<int64_t>> row_values = model::CacheRowValues(config);
  for (int64_t layer = 0; layer < static_cast<int64_t>(row_values.size()); ++layer) {
    for (int row = 0; row < static_cast<int>(row_values[layer].size()); ++row) {
      values.resize(static_cast<size_t>(row_values[layer][row]));
      for (int64_t p = 0; p < context; ++p) {
        for (int32_t slot = 0; slot < static_cast<int32_t>(batch); ++slot) {
          for (float& v : values) v = normal(rng);
          rows.WriteRow(table_of(slot, layer, row), layer, row, p, values.data());
        }
      }
    }
  }
  // Under mpirun the rows were written on rank 0 alone: every rank must read the same ones, or
  // the workers' attention (over a zeroed cache) and so their routing would differ from rank 0's.
  if (const auto* broadcaster = dynamic_cast<const engine::StepBroadcaster*>(&m)) {
    broadcaster->ShareCacheRows(rows);
  }

  std::uniform_int_distribution<int32_t> token(2, static_cast<int32_t>(config.vocab_size - 1));
  std::vector<float> logits(static_cast<size_t>(batch * config.vocab_size));
  StepResult result;
  for (int64_t s = 0; s <= steps; ++s) {
    model::ForwardBatch step;
    step.rows = &rows;
    for (int32_t slot = 0; slot < static_cast<int32_t>(batch); ++slot) {
      const int32_t id = token(rng);
      step.AddSequence(std::span<const int32_t>(&id, 1), context + s, tables[slot].blocks(),
                       model::ExpandedPositions(config, form, context), /*last_logits=*/true);
      if (!window_tables.empty()) step.AddWindowTable(window_tables[slot].blocks());
    }
    const Clock::time_point start = Clock::now();
    m.Forward(step, form, logits.data());
    // Step 0 warms up: it faults in the mapped weights and sizes the scratch buffers.
    if (s == 0) continue;
    result.step_ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - start).count());
    std::vector<int32_t>& argmax = result.argmax.emplace_back(batch);
    for (int64_t b = 0; b < batch; ++b) {
      const float* row = logits.data() + b * config.vocab_size;
      argmax[b] = static_cast<int32_t>(std::max_element(row, row + config.vocab_size) - row);
    }
  }
  for (cache::BlockTable& table : tables) table.Free(cache.pool());
  for (cache::BlockTable& table : window_tables) table.Free(cache.pool());
  return result;
}

Runner RegisterStepBench(CLI::App& app) {
  struct Options {
    std::string model_dir, context = "16384", attention = "absorbed,expanded", batch = "1",
                           cache_dtype = "auto";
    LoadFlags load_flags;  // --quantize, --precision
    int64_t steps = 5;
    uint32_t block_tokens = 64;
    uint64_t seed = 0;
    bool json = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "bench-step", "Time of one decode step at long context (random cached rows)");
  sub->add_option("--model", opt->model_dir, "Hugging Face checkpoint directory")->required();
  sub->add_option("--context", opt->context, "Cached tokens before the step, e.g. 16384,32768");
  sub->add_option("--attention", opt->attention, "MLA forms to time, e.g. absorbed,expanded");
  sub->add_option("--batch", opt->batch,
                  "Concurrent sequences, each at the context, decoded in one step, e.g. 1,8");
  sub->add_option("--steps", opt->steps, "Decode steps per point (the median is reported)")
      ->check(Positive(opt->steps));
  sub->add_option("--block-tokens", opt->block_tokens, "Tokens per cache block")
      ->check(Positive(opt->block_tokens));
  sub->add_option("--cache-dtype", opt->cache_dtype, "auto, f32, bf16 or fp8 (FlashMLA's e4m3 latent rows)");
  sub->add_option("--seed", opt->seed, "Seed of the random rows and tokens");
  sub->add_flag("--json", opt->json, "Also print one JSON line per point");
  AddLoadOptions(sub, opt->load_flags);
  return [opt] {
    const model::LoadOptions load = ParseLoadOptions(opt->load_flags);
    std::vector<int64_t> contexts;
    for (const std::string& item : SplitCommas(opt->context))
      contexts.push_back(ParsePositive(item, "--context"));
    std::vector<int64_t> batches;
    for (const std::string& item : SplitCommas(opt->batch)) {
      batches.push_back(ParsePositive(item, "--batch"));
      if (batches.back() > kMaxStepBatch) {
        Fail("--batch ", batches.back(), ": at most ", kMaxStepBatch, " sequences a step");
      }
    }
    std::vector<std::pair<std::string, model::AttentionForm>> forms;
    for (const std::string& item : SplitCommas(opt->attention))
      forms.emplace_back(item, generate::ParseAttentionForm(item));
    if (contexts.empty() || forms.empty() || batches.empty()) {
      Fail("--context, --attention and --batch need at least one value");
    }
    std::unique_ptr<model::Model> m = engine::LoadRankedModel(opt->model_dir, load);
    const model::ModelConfig& config = m->config();
    const model::Precision precision = m->precision();
    const model::CacheDType dtype = model::ParseCacheDType(opt->cache_dtype, config);
    for (int64_t context : contexts) {
      if (SaturatingAdd(SaturatingAdd(context, opt->steps), 1) > config.max_position_embeddings) {
        Fail("--context ", context, " + --steps ", opt->steps, " exceeds max_position_embeddings (",
             config.max_position_embeddings, ")");
      }
    }
    std::printf("%8s %6s %10s | %12s %12s\n", "context", "batch", "attention", "step ms p50",
                "step ms min");
    for (int64_t context : contexts) {
      for (int64_t batch : batches) {
        for (const auto& [name, form] : forms) {
          StepResult r =
              RunContext(*m, context, batch, opt->steps, form, opt->block_tokens, dtype, opt->seed);
          std::vector<double> sorted = r.step_ms;
          std::sort(sorted.begin(), sorted.end());
          const double p50 = sorted[sorted.size() / 2];
          std::printf("%8lld %6lld %10s | %12.2f %12.2f\n", static_cast<long long>(context),
                      static_cast<long long>(batch), name.c_str(), p50, sorted.front());
          if (opt->json) {
            nlohmann::ordered_json j = {{"model", opt->model_dir},
                                        {"context", context},
                                        {"batch", batch},
                                        {"attention", name},
                                        {"steps", opt->steps},
                                        {"step_ms_p50", p50},
                                        {"step_ms_min", sorted.front()},
                                        {"step_ms", r.step_ms},
                                        {"argmax", r.argmax},
                                        {"index_topk", config.index_topk},
                                        {"block_tokens", opt->block_tokens},
                                        {"cache_dtype", model::CacheDTypeName(dtype)},
                                        {"quantize", opt->load_flags.quantize},
                                        {"precision", model::PrecisionName(precision)},
                                        {"threads", threads::NumThreads()},
                                        {"kernels", kernels::BestKernelsName()}};
            std::cout << j.dump() << std::endl;
          }
          std::fflush(stdout);
        }
      }
    }
    return 0;
  };
}

LATENT_COMMAND(61, RegisterStepBench);

}  // namespace
}  // namespace latent::cli
