// Input: one JSON object per line: {"ids": [...]}, {"prompt": "text"} or {"messages": [...]} (chat,
// rendered with the checkpoint's chat template; optional "tools", "chat_template_kwargs",
// "add_generation_prompt" (default true)), plus optional "max_tokens", sampling fields
// ("temperature" (default 0: greedy), "top_k" (-1 or 0: off), "top_p", "min_p", "seed",
// "repetition_penalty", where generation_config.json sets none of temperature, top_p, top_k, min_p
// and repetition_penalty: a line that leaves one out takes the file's, as the server's requests do;
// "presence_penalty", "frequency_penalty", "logprobs" (top-n alternatives, 0: the sampled token's
// only; at most 20, and -1 is refused, as the server's), "n", "logit_bias" ({"5": 2.5}: token
// ids as strings, biases in [-100, 100]), "allowed_token_ids" (a non-empty list)),
// "prompt_logprobs" (the same for every prompt token: scoring; with "max_tokens": 0 nothing is
// generated), "stop_token_ids", "stop" (a string or a list
// of strings, matched on the detokenized text; "include_stop_str_in_output": true keeps the one
// that matched in "text"), "skip_special_tokens" (default true: "text" leaves special tokens out,
// as the server's field), "ignore_eos", "min_tokens" (no EOS, stop id or stop string ends a sample
// before it has that many tokens; at most max_tokens), "structured_outputs" (vLLM's object: one of
// "json", "regex", "choice", "grammar", "json_object"; the output is constrained to it,
// structured/output_spec.h), "arrival_step" (submit the request when the engine reaches that step;
// for tests of requests arriving mid-flight) and "cancel_step" (cancel it when the engine reaches
// that step).
// Output, in input order: {"index": i, "ids": [...], "text": ... (when the model or --tokenizer
// directory has a tokenizer),
// "finish_reason": "stop"|"length", ...; "stop_reason" (vLLM's): the stop string that ended it,
// if one did ("text" then ends before it and "ids" end with the token that completed it), else
// the "stop_token_ids" entry or generation_config EOS id other than the tokenizer's that did (an
// integer), absent when neither did (the tokenizer's EOS, checked first, gives none); the EOS or
// stop id that ended it ends "ids", but its text is not in "text"
// unless "include_stop_str_in_output" (vLLM); with
// "prompt_logprobs": "prompt_logprobs": [null, {"token", "logprob", "top_logprobs"}, ...], one
// per prompt token, null for the first, as vLLM's};
// with n > 1, "samples": [{"ids", "finish_reason"}, ...]; a bad line gets {"index": i, "error"}.
// The exit code is 0 when a line ran, 2 when --prompt's request or every line of --prompts failed
// (their error lines are printed first), 1 when a line met an internal error.
#include "engine/distributed_model.h"
#include "engine/debug_replay.h"
#include "cli/batch_generate.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/input_file.h"
#include "generate/request_job.h"
#include "generate/request_line.h"
#include "model/generation_config.h"
#include "parallel/communicator.h"
#include "structured/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace latent::cli {
namespace {

using Json = nlohmann::json;

struct Job {
  std::unique_ptr<generate::RequestJob> job;  // Null when the line is malformed.
  int64_t id = -1;  // The engine's request id once submitted.
  std::string error;  // Set when the line is malformed or the engine refused it.
  size_t line = 0;  // Its line in the input (from 1), which every error names.
};

void PrintProgress(size_t done, size_t total, bool tty) {
  if (!tty) return;
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu requests", filled, "##############################",
               width - filled, "", done, total);
  if (done == total) std::fputc('\n', stderr);
}

}  // namespace

int RunBatchGenerate(const BatchGenerateOptions& options) {
  const std::string text_dir =
      options.tokenizer_dir.empty() ? options.model_dir : options.tokenizer_dir;
  if (!options.tokenizer_dir.empty()) tokenizer::Tokenizer::CheckNamedDir(options.tokenizer_dir);
  generate::TextTools text_tools(text_dir);
  // Loaded now where there is one, so every line's output has "text", not only those that run
  // after a line that needed the tokenizer: a line's output never depends on the others. On
  // rank 0 only (workers print nothing). A tokenizer that does not load stops no ids line: no
  // line then has "text", and each line that needs it fails with the error, as before.
  if (parallel::World().rank() == 0 && tokenizer::Tokenizer::DirHasTokenizer(text_dir)) {
    try {
      text_tools.Tokenizer();
    } catch (const Error&) {
    }
  }
  // generation_config.json's sampling fields fill those a line leaves out, as the server's
  // requests; read and checked (SamplingDefaults::Check) before the weights, so a bad one stops
  // the command before any line runs.
  const model::SamplingDefaults defaults = model::LoadSamplingDefaults(options.model_dir);
  const generate::RequestJson sampling_defaults = defaults.AsFields();
  const int64_t max_tokens = options.max_tokens.value_or(defaults.max_new_tokens.value_or(16));
  // Said once, as `latent serve` says it: a line without "temperature" then samples, not greedy.
  generate::RequestJson taken = sampling_defaults;
  if (options.max_tokens) taken.erase("max_tokens");  // --max-tokens wins
  if (!taken.empty() && parallel::World().rank() == 0) {
    std::cerr << "latent generate: sampling defaults from generation_config.json (for the fields "
                 "a line leaves out): "
              << taken.dump() << "\n";
  }
  std::vector<std::string> lines;
  std::string source = options.prompts_path;
  if (!options.prompts_path.empty()) {
    std::ifstream in = OpenInputFile("--prompts", options.prompts_path);
    errno = 0;  // so that a read that fails names its own reason (CheckReadToEnd)
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    CheckReadToEnd(in, "--prompts", options.prompts_path);
  } else {
    // --prompt TEXT [--chat]: one request.
    Json line = options.chat ? Json{{"messages", {{{"role", "user"}, {"content", options.prompt_text}}}}}
                             : Json{{"prompt", options.prompt_text}};
    lines.push_back(line.dump());
    source = "--prompt";
  }
  std::vector<Job> jobs;
  // A line that met a bug in latent (a failed check: parsing it, compiling its constraint,
  // submitting it, or in a step it ran in) still gets its error and the others still run, but the
  // command then exits 1, as any internal error does (docs/reliability.md).
  bool internal_errors = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& text = lines[i];
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Job& job = jobs.emplace_back();
    job.line = i + 1;
    try {
      generate::RequestLine parsed =
          generate::ParseRequestLine(generate::ParseRequestLineJson(text), text_tools, max_tokens,
                                     options.ignore_eos, sampling_defaults);
      // It needs the model's context, and lines are parsed before the model loads.
      if (parsed.truncate_prompt_tokens) {
        Fail("field 'truncate_prompt_tokens' is not taken by `latent generate` (latent.LLM and "
             "`latent serve` take it)");
      }
      job.job = std::make_unique<generate::RequestJob>(std::move(parsed), text_tools,
                                                       /*stream_text=*/false);
    } catch (const Json::exception& e) {
      job.error = StrCat(source, ":", job.line, ": invalid JSON: ", e.what());
    } catch (const InternalError& e) {
      job.error = StrCat(source, ":", job.line, ": internal error: ", e.what());
      internal_errors = true;
    } catch (const Error& e) {
      job.error = StrCat(source, ":", job.line, ": ", e.what());
    }
  }

  std::unique_ptr<model::Model> m = engine::LoadRankedModel(options.model_dir, options.load);
  model::GenerationConfig gen = model::LoadGenerationConfig(options.model_dir, m->config());
  // The tokenizer's EOS ends a sample with no stop_reason; the other EOS ids with their id.
  model::SetTokenizerEos(gen, text_tools.has_tokenizer() ? text_tools.Tokenizer().eos_id()
                                                         : std::nullopt);
  engine::EngineOptions engine_options = options.engine;
  if (!options.debug_replay_path.empty()) {
    engine_options.debug_replay =
        engine::LoadDebugReplay(options.debug_replay_path, m->config().vocab_size);
  }
  // Structured output for the lines that ask for it, over the model's vocabulary: made on the
  // first such line. Rank 0 alone gets here (on a worker rank LoadRankedModel runs the worker loop
  // and ends in WorkerFinished), and it alone samples, so only it compiles grammars.
  const int64_t vocab_size = m->config().vocab_size;
  const std::vector<int32_t> eos_ids = gen.EndIds(vocab_size);
  std::unique_ptr<structured::LazyStructuredOutput> structured_output;
  auto constrain = [&](generate::RequestJob& job) {
    if (!job.line().output.active()) return;
    if (!structured_output) {
      structured_output = std::make_unique<structured::LazyStructuredOutput>(
          &text_tools.Tokenizer(), vocab_size, eos_ids);
    }
    job.SetConstraint(structured_output->Get().Constraint(job.line().output));
  };
  engine::Engine engine(std::move(m), std::move(gen), engine_options);

  size_t finished = 0;
  const bool tty = ::isatty(STDERR_FILENO);
  std::vector<size_t> pending;  // Jobs not yet submitted, in input order.
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].error.empty()) pending.push_back(i); else ++finished;
  }
  int64_t step = 0;
  while (finished < jobs.size()) {
    for (auto it = pending.begin(); it != pending.end();) {
      Job& job = jobs[*it];
      if (job.job->line().arrival_step > step) {
        ++it;
        continue;
      }
      generate::RequestJob* request_job = job.job.get();
      auto on_output = [request_job, &finished](const engine::RequestOutput& out) {
        if (request_job->OnOutput(out)) ++finished;
      };
      try {
        constrain(*job.job);
        job.id = engine.Submit(job.job->request(), on_output);
      } catch (const InternalError& e) {  // a bug met on this line: reported, and exit 1 at the end
        job.error = StrCat(source, ":", job.line, ": internal error: ", e.what());
        internal_errors = true;
        ++finished;
      } catch (const Error& e) {
        // Its structured_outputs did not compile, or the engine refused it: the line's fault, named
        // as a parse error names it.
        job.error = StrCat(source, ":", job.line, ": ", e.what());
        ++finished;
      }
      it = pending.erase(it);
    }
    for (Job& job : jobs) {
      if (job.id < 0) continue;
      if (job.job->line().cancel_step == step) engine.Cancel(job.id);
      // Every sample ended on a stop string: the engine still runs them, so end the request (its
      // samples' callbacks then bring kCancelled, which they ignore, and free the blocks).
      if (job.job->TakeCancelNeeded()) engine.Cancel(job.id);
    }
    engine.Step();
    ++step;
    PrintProgress(finished, jobs.size(), tty);
  }

  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    nlohmann::ordered_json out = {{"index", i}};
    if (!job.error.empty()) {
      out["error"] = job.error;
    } else {
      const auto& samples = job.job->samples();
      // A step that failed a check ended its samples with the engine's "internal error: " text.
      for (const auto& sample : samples) {
        if (sample.error.starts_with("internal error: ")) internal_errors = true;
      }
      if (job.job->request().prompt_logprobs >= 0) {
        out["prompt_logprobs"] = job.job->PromptLogprobsJson();
      }
      if (samples.size() == 1) {
        out.update(job.job->SampleJson(samples[0]));
      } else {
        out["samples"] = nlohmann::ordered_json::array();
        for (const auto& s : samples) out["samples"].push_back(job.job->SampleJson(s));
      }
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  }

  const engine::EngineMetrics metrics = engine.Metrics();
  Json summary = {
      {"requests", jobs.size()},
      {"generated_tokens", metrics.generated_tokens},
      {"prompt_tokens", metrics.prompt_tokens},
      {"tokens_per_second", metrics.busy_seconds > 0 ? metrics.generated_tokens / metrics.busy_seconds : 0.0},
      {"steps", metrics.steps},
      {"cache_bytes_per_token", metrics.cache_bytes_per_token},
      {"cache_layer_bytes_per_token", metrics.cache_layer_bytes_per_token},
      {"cache_dtype", metrics.cache_dtype},
      {"cache_blocks", metrics.total_blocks},
      {"block_tokens", metrics.block_tokens},
      {"prefix_hit_tokens", metrics.prefix_hit_tokens},
      {"prefix_hit_rate", metrics.prompt_tokens ? static_cast<double>(metrics.prefix_hit_tokens) / metrics.prompt_tokens : 0.0},
      {"preemptions", metrics.preemptions},
      {"draft_tokens", metrics.draft_tokens},
      {"accepted_draft_tokens", metrics.accepted_draft_tokens},
      {"used_blocks_at_end", metrics.used_blocks},
      {"peak_window_blocks", metrics.peak_window_blocks},
      {"window_block_tokens", metrics.window_block_tokens},
  };
  std::cerr << "latent: summary " << summary.dump() << "\n";
  if (internal_errors) {
    std::cerr << "latent: internal error: a line failed a check in latent (its error line)\n";
    return 1;
  }
  // Nothing generated: --prompt's one request failed, or every line of --prompts did. Their
  // error lines are out; the exit says it too, as for any bad input.
  const auto failed = [](const Job& job) {
    if (!job.error.empty()) return true;
    const auto& samples = job.job->samples();
    return !samples.empty() && std::all_of(samples.begin(), samples.end(),
                       [](const auto& sample) { return !sample.error.empty(); });
  };
  if (!jobs.empty() && std::all_of(jobs.begin(), jobs.end(), failed)) {
    if (options.prompts_path.empty()) {
      const Job& job = jobs.front();
      Fail(!job.error.empty() ? job.error : StrCat(source, ": ", job.job->samples().front().error));
    }
    Fail(options.prompts_path, ": every line failed (", jobs.size(), " error line",
         jobs.size() == 1 ? "" : "s", " on stdout)");
  }
  return 0;
}

}  // namespace latent::cli
