// `latent bench --model DIR [--pp 128,512] [--tg 32] [--batch 1,4,16] [engine flags]`: a sweep in
// the style of llama-batched-bench through the real engine. For every (PP, TG, B): B requests
// of PP random prompt tokens (no shared prefix) each generate TG tokens (EOS ignored), all
// submitted at once. Prints a table and, with --json, one JSON line per point: machine, commit,
// flags, prefill and decode tokens/s, time to first token and inter-token latency percentiles.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "engine/distributed_model.h"
#include "parallel/communicator.h"
#include "base/error.h"
#include "base/saturating.h"
#include "generate/attention_form.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "cli/load_options.h"
#include "cli/speculative_options.h"
#include "engine/engine.h"
#include "engine/rank_check.h"
#include "kernels/kernel_table.h"
#include "model/generation_config.h"
#include "threads/thread_pool.h"


namespace latent::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Concurrent requests a point may submit: each holds its prompt and timings before the engine
// runs any, so a typo's billions would end in bad_alloc rather than a message.
constexpr int64_t kMaxBenchBatch = 1 << 16;
constexpr int64_t kMaxPointTokens = int64_t{1} << 30;  // 4 GiB of prompt ids

std::vector<int64_t> ParseList(const std::string& text, const char* flag) {
  std::vector<int64_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const int64_t v = std::stoll(item, &used);
      if (used != item.size() || v <= 0) throw std::invalid_argument(item);
      values.push_back(v);
    } catch (const std::exception&) {
      Fail(flag, ": '", item, "' is not a positive integer");
    }
  }
  if (values.empty()) Fail(flag, ": no values");
  return values;
}

std::string CpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

struct Point {
  int64_t pp, tg, batch;
};

// One run of a point: its phases' wall times and every request's latencies.
struct PointRun {
  double prefill_s = 0, decode_s = 0, total_s = 0;
  std::vector<double> ttft, itl;  // seconds: each request's first token; each later token's gap
};

PointRun RunPoint(engine::Engine& engine, const Point& pt, int64_t vocab, uint64_t seed,
                  const engine::SamplingParams& sampling) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(2, static_cast<int32_t>(vocab - 1));
  struct Timing {
    Clock::time_point first;
    std::vector<Clock::time_point> tokens;
    bool done = false;
    std::string error;  // why it finished with FinishReason::kError
  };
  std::vector<Timing> timings(pt.batch);
  int64_t remaining = pt.batch;
  const Clock::time_point start = Clock::now();
  for (int64_t i = 0; i < pt.batch; ++i) {
    engine::Request r;
    for (int64_t t = 0; t < pt.pp; ++t) r.prompt.push_back(token(rng));
    r.max_tokens = pt.tg;
    r.ignore_eos = true;
    r.sampling = sampling;
    r.sampling.seed = seed * 1000003 + static_cast<uint64_t>(i);  // each request its own draws
    engine.Submit(std::move(r), [&timings, &remaining, i](const engine::RequestOutput& out) {
      Timing& timing = timings[i];
      if (out.has_token) timing.tokens.push_back(Clock::now());
      if (out.finish != engine::FinishReason::kNone) {
        if (out.finish == engine::FinishReason::kError) timing.error = out.error;
        timing.done = true;
        --remaining;
      }
    });
  }
  while (remaining > 0) engine.Step();
  const Clock::time_point end = Clock::now();

  // Prefill ends when the last request got its first token; decode is the rest.
  Clock::time_point prefill_end = start;
  PointRun run;
  for (size_t i = 0; i < timings.size(); ++i) {
    const Timing& t = timings[i];
    // A request that failed (a forward or sampling error) may have no token to time, and a
    // point with one has no meaning: say why instead of reading past an empty list.
    if (!t.error.empty() || t.tokens.empty()) {
      Fail("bench point pp ", pt.pp, ", tg ", pt.tg, ", batch ", pt.batch, ": request ", i,
           t.error.empty() ? std::string(" ended without a token") : ": " + t.error);
    }
    prefill_end = std::max(prefill_end, t.tokens.front());
    run.ttft.push_back(std::chrono::duration<double>(t.tokens.front() - start).count());
    for (size_t k = 1; k < t.tokens.size(); ++k) {
      run.itl.push_back(std::chrono::duration<double>(t.tokens[k] - t.tokens[k - 1]).count());
    }
  }
  run.prefill_s = std::chrono::duration<double>(prefill_end - start).count();
  run.decode_s = std::chrono::duration<double>(end - prefill_end).count();
  run.total_s = std::chrono::duration<double>(end - start).count();
  return run;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

// A point's JSON from its repetitions: the rates are the mean of each run's rate (as
// llama-bench's avg_ts over its -r runs), each run's rates are listed, and the latency
// percentiles are over every request of every run.
nlohmann::ordered_json PointJson(const Point& pt, const std::vector<PointRun>& runs) {
  std::vector<double> prefill_rates, decode_rates, total_s, ttft, itl;
  for (const PointRun& run : runs) {
    prefill_rates.push_back(run.prefill_s > 0 ? pt.batch * pt.pp / run.prefill_s : 0.0);
    // The first generated token of each request comes with the prefill; TG - 1 follow.
    decode_rates.push_back(run.decode_s > 0 ? pt.batch * (pt.tg - 1) / run.decode_s : 0.0);
    total_s.push_back(run.total_s);
    ttft.insert(ttft.end(), run.ttft.begin(), run.ttft.end());
    itl.insert(itl.end(), run.itl.begin(), run.itl.end());
  }
  nlohmann::ordered_json j;
  j["pp"] = pt.pp;
  j["tg"] = pt.tg;
  j["batch"] = pt.batch;
  j["repetitions"] = runs.size();
  const double mean_total_s = Mean(total_s);
  j["total_s"] = mean_total_s;
  j["prefill_tokens_per_s"] = Mean(prefill_rates);
  j["decode_tokens_per_s"] = Mean(decode_rates);
  j["tokens_per_s"] = pt.batch * (pt.pp + pt.tg) / mean_total_s;
  j["prefill_tokens_per_s_each"] = prefill_rates;
  j["decode_tokens_per_s_each"] = decode_rates;
  j["ttft_ms_p50"] = 1e3 * Percentile(ttft, 0.5);
  j["ttft_ms_p99"] = 1e3 * Percentile(ttft, 0.99);
  // The fastest step: on a shared host, the figure to set beside a best-of bandwidth pass.
  j["itl_ms_min"] = itl.empty() ? 0.0 : 1e3 * *std::min_element(itl.begin(), itl.end());
  j["itl_ms_p50"] = 1e3 * Percentile(itl, 0.5);
  j["itl_ms_p90"] = 1e3 * Percentile(itl, 0.9);
  j["itl_ms_p99"] = 1e3 * Percentile(itl, 0.99);
  return j;
}

// Per kind of step (prefill, decode, mixed) during a point: rank 0's mean step time, its time in
// collectives, and with `detail` their own time (transfer); also printed on stderr.
nlohmann::ordered_json StepsJson(const engine::StepCommStats& before,
                                 const engine::StepCommStats& after, bool detail) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  const std::pair<const char*, engine::StepTimes engine::StepCommStats::*> kinds[] = {
      {"prefill", &engine::StepCommStats::prefill},
      {"decode", &engine::StepCommStats::decode},
      {"mixed", &engine::StepCommStats::mixed}};
  for (const auto& [name, member] : kinds) {
    const engine::StepTimes& a = before.*member;
    const engine::StepTimes& b = after.*member;
    const int64_t steps = b.steps - a.steps;
    if (steps == 0) continue;
    const double seconds = b.seconds - a.seconds;
    const double collective = b.collective_seconds - a.collective_seconds;
    nlohmann::ordered_json k;
    k["steps"] = steps;
    k["tokens"] = b.tokens - a.tokens;
    k["step_ms"] = 1e3 * seconds / steps;
    k["collective_ms"] = 1e3 * collective / steps;
    k["collective_share"] = seconds > 0 ? collective / seconds : 0.0;
    std::string line = "latent bench: " + std::string(name) + " steps: " + std::to_string(steps);
    char text[256];
    std::snprintf(text, sizeof text, ", %.2f ms each, %.2f ms (%.1f%%) in collectives",
                  1e3 * seconds / steps, 1e3 * collective / steps,
                  seconds > 0 ? 100 * collective / seconds : 0.0);
    line += text;
    if (detail) {
      const double transfer = b.transfer_seconds - a.transfer_seconds;
      k["transfer_ms"] = 1e3 * transfer / steps;
      k["transfer_share"] = seconds > 0 ? transfer / seconds : 0.0;
      std::snprintf(text, sizeof text, ", of which %.2f ms (%.1f%%) transfer, the rest waiting",
                    1e3 * transfer / steps, seconds > 0 ? 100 * transfer / seconds : 0.0);
      line += text;
    }
    std::fprintf(stderr, "%s\n", line.c_str());
    j[name] = k;
  }
  return j;
}

Runner RegisterBench(CLI::App& app) {
  struct Options {
    std::string model_dir, pp = "128", tg = "32", batch = "1,4,16", attention = "auto";
    bool json = false;
    uint64_t seed = 0;
    int64_t warmup = 1;
    int64_t repetitions = 1;
    engine::SamplingParams sampling;  // greedy unless --temperature
    engine::EngineOptions engine;
    bool no_prefix_cache = false;
    bool comm_detail = false;
    LoadFlags load_flags;  // --quantize, --precision
  };
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("bench", "Throughput/latency sweep through the engine");
  sub->add_option("--model", opt->model_dir, "Hugging Face checkpoint directory")->required();
  sub->add_option("--pp", opt->pp, "Prompt lengths, a list: e.g. 128,512")->capture_default_str();
  sub->add_option("--tg", opt->tg, "Generated tokens per request, a list")->capture_default_str();
  sub->add_option("--batch", opt->batch, "Concurrent requests, a list: e.g. 1,4,16,64")
      ->capture_default_str();
  sub->add_flag("--json", opt->json, "Also print one JSON line per point");
  sub->add_option("--seed", opt->seed, "Prompt token seed");
  sub->add_option("--warmup", opt->warmup,
                  "Untimed points before the sweep (default 1, as llama-bench's warm-up run): "
                  "the first point's PP and batch, 2 tokens each")
      ->check(NonNegative(opt->warmup));
  sub->add_option("--repetitions", opt->repetitions,
                  "Runs of each point, with fresh prompts (default 1, as llama-bench's -r): the "
                  "rates reported are their mean, each run's are listed in the JSON")
      ->check(Positive(opt->repetitions));
  sub->add_option("--temperature", opt->sampling.temperature,
                  "Sample at this temperature (default 0: greedy), each request seeded");
  sub->add_option("--top-k", opt->sampling.top_k, "Top-k filter when sampling (0: off)");
  sub->add_option("--top-p", opt->sampling.top_p, "Top-p filter when sampling (1: off)");
  sub->add_option("--min-p", opt->sampling.min_p, "Min-p filter when sampling (0: off)");
  sub->add_option("--max-batch-tokens", opt->engine.max_batch_tokens, "Token budget per step")
      ->check(Positive(opt->engine.max_batch_tokens));
  sub->add_option("--max-seqs", opt->engine.max_seqs, "Sequences per step at most")
      ->check(Positive(opt->engine.max_seqs));
  sub->add_option("--block-tokens", opt->engine.block_tokens, "Tokens per cache block")
      ->check(Positive(opt->engine.block_tokens));
  sub->add_option("--num-blocks", opt->engine.num_blocks, "Cache blocks")
      ->check(Positive(opt->engine.num_blocks));
  sub->add_option("--cache-memory", opt->engine.cache_memory_gib, "Cache size in GiB")
      ->check(Positive(opt->engine.cache_memory_gib));
  sub->add_option("--cache-dtype", opt->engine.cache_dtype, "auto, f32, bf16 or fp8 (FlashMLA's e4m3 latent rows)");
  sub->add_flag("--no-prefix-cache", opt->no_prefix_cache, "Do not reuse cached prompt blocks");
  AddSpeculativeOptions(sub, opt->engine);
  sub->add_flag("--comm-detail", opt->comm_detail,
                "Under mpirun: also split each step's time in collectives into transfer and "
                "waiting for the other ranks (one small all-gather after every step)");
  sub->add_option("--attention", opt->attention,
                  "MLA form: auto (absorbed for decode, expanded for long prefill chunks), absorbed "
                  "or expanded");
  AddLoadOptions(sub, opt->load_flags);
  return [opt] {
    opt->engine.attention = generate::ParseAttentionForm(opt->attention);
    opt->sampling.Validate();
    const model::LoadOptions load = ParseLoadOptions(opt->load_flags);
    const auto pps = ParseList(opt->pp, "--pp");
    const auto tgs = ParseList(opt->tg, "--tg");
    const auto batches = ParseList(opt->batch, "--batch");
    for (int64_t b : batches) {
      if (b > kMaxBenchBatch) {
        Fail("--batch ", b, ": at most ", kMaxBenchBatch, " requests a point");
      }
    }
    opt->engine.prefix_caching = !opt->no_prefix_cache;
    std::unique_ptr<model::Model> m = engine::LoadRankedModel(opt->model_dir, load);
    // Under mpirun, rank 0's model broadcasts the steps and times them (the engine owns it).
    auto* broadcaster = dynamic_cast<engine::StepBroadcaster*>(m.get());
    if (broadcaster != nullptr) broadcaster->set_comm_detail(opt->comm_detail);
    const int64_t vocab = m->config().vocab_size;
    // Checked before any prompt is built: a --pp past the model's positions would first allocate
    // its tokens (2e9 of them: bad_alloc, or minutes of filling) and only then be refused.
    const int64_t positions = m->config().max_position_embeddings;
    for (int64_t pp : pps) {
      for (int64_t tg : tgs) {
        if (SaturatingAdd(pp, tg) > positions) {
          Fail("--pp ", pp, " + --tg ", tg, " exceeds the model's max_position_embeddings (",
               positions, ")");
        }
      }
      for (int64_t b : batches) {
        if (SaturatingMul(pp, b) > kMaxPointTokens) {
          Fail("--pp ", pp, " with --batch ", b, ": a point's prompts hold at most ",
               kMaxPointTokens, " tokens");
        }
      }
    }
    const model::Precision precision = m->precision();
    model::GenerationConfig gen = model::LoadGenerationConfig(opt->model_dir, m->config());
    engine::Engine engine(std::move(m), std::move(gen), opt->engine);

    nlohmann::ordered_json context;
    context["machine"] = {{"cpu", CpuName()}, {"cores", std::thread::hardware_concurrency()}};
    context["commit"] = engine::SourceState();  // what the ranks compare
    context["model"] = opt->model_dir;
    context["flags"] = {{"max_batch_tokens", opt->engine.max_batch_tokens},
                        {"block_tokens", opt->engine.block_tokens},
                        {"cache_dtype", opt->engine.cache_dtype},
                        {"prefix_cache", opt->engine.prefix_caching},
                        {"speculative_tokens", opt->engine.speculative_tokens},
                        {"attention", opt->attention},
                        {"quantize", model::WeightQuantizationName(load.quantize)},
                        {"precision", model::PrecisionName(precision)},
                        {"threads", threads::NumThreads()},
                        {"warmup_points", opt->warmup},
                        {"repetitions", opt->repetitions},
                        {"sampling", {{"temperature", opt->sampling.temperature},
                                      {"top_k", opt->sampling.top_k},
                                      {"top_p", opt->sampling.top_p},
                                      {"min_p", opt->sampling.min_p}}},
                        {"kernels", kernels::BestKernelsName()}};
    std::printf("%6s %6s %6s | %12s %12s | %10s %10s %10s\n", "PP", "TG", "B", "prefill t/s",
                "decode t/s", "TTFT p50ms", "ITL p50ms", "ITL p99ms");
    // The first step of a process pays for what later steps find ready (first-touch page faults
    // of the activation buffers, the heap growing to its working size, the thread pool waking), so
    // the sweep starts after untimed warm-up points, as llama-bench's and llama-batched-bench's do.
    for (int64_t i = 0; i < opt->warmup; ++i) {
      RunPoint(engine, {pps.front(), 2, batches.front()}, vocab,
               ~opt->seed - static_cast<uint64_t>(i), opt->sampling);
    }
    uint64_t seed = opt->seed;
    for (int64_t pp : pps) {
      for (int64_t tg : tgs) {
        for (int64_t b : batches) {
          // Scale-out (mpirun): rank 0's time and bytes in collectives during this point; the
          // time includes waiting for the slowest rank.
          parallel::Communicator& world = parallel::World();
          const double comm_s0 = world.seconds_in_collectives();
          const int64_t comm_bytes0 = world.bytes_moved();
          const auto point_start = std::chrono::steady_clock::now();
          const engine::StepCommStats steps0 =
              broadcaster != nullptr ? broadcaster->comm_stats() : engine::StepCommStats{};
          const engine::EngineMetrics metrics0 = engine.Metrics();
          std::vector<PointRun> runs;
          for (int64_t r = 0; r < opt->repetitions; ++r) {
            runs.push_back(RunPoint(engine, {pp, tg, b}, vocab, seed++, opt->sampling));
          }
          nlohmann::ordered_json point = PointJson({pp, tg, b}, runs);
          if (opt->engine.speculative_tokens > 0) {
            const engine::EngineMetrics metrics1 = engine.Metrics();
            const int64_t drafted = metrics1.draft_tokens - metrics0.draft_tokens;
            const int64_t accepted =
                metrics1.accepted_draft_tokens - metrics0.accepted_draft_tokens;
            point["draft_tokens"] = drafted;
            point["accepted_draft_tokens"] = accepted;
            std::fprintf(stderr, "latent bench: %lld draft tokens, %lld accepted (%.1f%%)\n",
                         static_cast<long long>(drafted), static_cast<long long>(accepted),
                         drafted > 0 ? 100.0 * accepted / drafted : 0.0);
          }
          if (world.size() > 1) {
            const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                              point_start).count();
            const double comm = world.seconds_in_collectives() - comm_s0;
            point["ranks"] = world.size();
            point["comm_seconds"] = comm;
            point["comm_share"] = wall > 0 ? comm / wall : 0.0;
            point["comm_bytes_rank0"] = world.bytes_moved() - comm_bytes0;
            std::fprintf(stderr, "latent bench: %d ranks: %.1f%% of the time in collectives, %lld bytes moved by rank 0\n",
                         world.size(), 100 * point["comm_share"].get<double>(),
                         static_cast<long long>(world.bytes_moved() - comm_bytes0));
            if (broadcaster != nullptr) {
              point["steps"] = StepsJson(steps0, broadcaster->comm_stats(), opt->comm_detail);
            }
          }
          std::printf("%6lld %6lld %6lld | %12.1f %12.1f | %10.2f %10.2f %10.2f\n",
                      static_cast<long long>(pp), static_cast<long long>(tg), static_cast<long long>(b),
                      point["prefill_tokens_per_s"].get<double>(), point["decode_tokens_per_s"].get<double>(),
                      point["ttft_ms_p50"].get<double>(), point["itl_ms_p50"].get<double>(),
                      point["itl_ms_p99"].get<double>());
          if (opt->json) {
            nlohmann::ordered_json line = context;
            line.update(point);
            std::printf("%s\n", line.dump().c_str());
          }
          std::fflush(stdout);
        }
      }
    }
    return 0;
  };
}

}  // namespace

LATENT_COMMAND(60, RegisterBench);

}  // namespace latent::cli
