// Input: one JSON object per line: {"ids": [...]}, {"prompt": "text"} or {"messages": [...]}
// (chat, rendered with the checkpoint's chat template; optional "tools",
// "add_generation_prompt" (default true)), plus optional "max_tokens", sampling fields
// ("temperature" (default 0: greedy), "top_k", "top_p", "min_p", "seed", "repetition_penalty",
// "presence_penalty", "frequency_penalty", "logprobs" (top-n alternatives, 0: the sampled
// token's only), "n"), "prompt_logprobs" (the same for every prompt token: scoring; with
// "max_tokens": 0 nothing is generated), "stop_token_ids", "stop" (a string or a list of strings,
// matched on the detokenized text), "ignore_eos", and "arrival_step" (submit the request
// when the engine reaches that step; for tests of requests arriving mid-flight) and
// "cancel_step" (cancel it when the engine reaches that step).
// Output, in input order: {"index": i, "ids": [...], "text": ... (with a tokenizer),
// "finish_reason": "stop"|"length", ...; "stop_reason": the stop string that ended it, if one
// did: "text" then ends before it and "ids" end with the token that completed it; with
// "prompt_logprobs": "prompt_logprobs": [null, {"token", "logprob", "top_logprobs"}, ...], one
// per prompt token, null for the first, as vLLM's};
// with n > 1, "samples": [{"ids", "finish_reason"}, ...]; a bad line gets {"index": i, "error"}.
#include "cli/batch_generate.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/generation_config.h"
#include "server/stop_strings.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace latent::cli {
namespace {

using Json = nlohmann::json;

struct Job {
  engine::Request request;
  int64_t arrival_step = 0;
  int64_t cancel_step = -1;
  int64_t id = -1;  // The engine's request id once submitted.
  std::string error;  // Set when the line is malformed or the engine refused it.
  std::vector<std::string> stop;  // Stop strings ("stop").
  struct Sample {
    std::vector<int32_t> ids;
    std::vector<Json> logprobs;
    engine::FinishReason finish = engine::FinishReason::kNone;
    std::string error;
    // With stop strings: the text so far, matched as it streams.
    std::unique_ptr<tokenizer::StreamingDetokenizer> detokenizer;
    std::unique_ptr<server::StopStringMatcher> matcher;
    std::string text;
    std::string stop_reason;  // The stop string that ended this sample, if one did.
  };
  std::vector<Sample> samples;
  Json prompt_logprobs = Json::array();  // With "prompt_logprobs": null, then one per token.
  int32_t done = 0;             // Samples the engine has finished.
  int32_t stopped_by_text = 0;  // Samples a stop string ended (the engine runs them on).
  bool cancel_sent = false;
};

// "stop": a string or a list of non-empty strings.
std::vector<std::string> StopStrings(const Json& line) {
  if (!line.contains("stop") || line["stop"].is_null()) return {};
  const Json& stop = line["stop"];
  std::vector<std::string> out;
  if (stop.is_string()) {
    out.push_back(stop.get<std::string>());
  } else if (stop.is_array()) {
    for (const Json& s : stop) {
      if (!s.is_string()) Fail("field 'stop' must be a string or a list of strings: ", stop.dump());
      out.push_back(s.get<std::string>());
    }
  } else {
    Fail("field 'stop' must be a string or a list of strings: ", stop.dump());
  }
  for (const std::string& s : out) {
    if (s.empty()) Fail("field 'stop' holds an empty string");
  }
  return out;
}

// The text of a stop-string sample: what the matcher released, the rest once the engine ends.
void FinishText(Job::Sample& sample) {
  if (!sample.matcher || !sample.stop_reason.empty()) return;
  sample.text += sample.matcher->Push(sample.detokenizer->Finish());
  if (sample.matcher->stopped()) return;
  sample.text += sample.matcher->Finish();
}

template <typename T>
T Field(const Json& line, const char* key, T fallback) {
  if (!line.contains(key) || line[key].is_null()) return fallback;
  try {
    return line[key].get<T>();
  } catch (const Json::exception&) {
    Fail("field '", key, "' has the wrong type: ", line[key].dump());
  }
}

// Loaded on first use: only text and chat prompts need them.
class TextTools {
 public:
  explicit TextTools(std::string dir) : dir_(std::move(dir)) {}
  const tokenizer::Tokenizer& Tokenizer() {
    if (!tokenizer_) tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::FromDir(dir_));
    return *tokenizer_;
  }
  const tokenizer::ChatTemplate& Template() {
    if (!template_) template_ = std::make_unique<tokenizer::ChatTemplate>(tokenizer::ChatTemplate::FromTokenizerDir(dir_));
    return *template_;
  }
  bool has_tokenizer() const { return tokenizer_ != nullptr; }

 private:
  std::string dir_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::ChatTemplate> template_;
};

// The prompt token ids of a request line: "ids", "prompt" (text, encoded with special tokens as
// transformers' tokenizer(text) does) or "messages" (chat template, then encoded without adding
// special tokens: the template writes them).
std::vector<int32_t> PromptIds(const Json& line, TextTools& text) {
  if (line.contains("ids")) return Field<std::vector<int32_t>>(line, "ids", {});
  if (line.contains("prompt")) {
    if (!line["prompt"].is_string()) Fail("field 'prompt' must be a string");
    return text.Tokenizer().Encode(line["prompt"].get<std::string>(), /*add_special_tokens=*/true);
  }
  if (line.contains("messages")) {
    tokenizer::ChatRequest chat;
    chat.messages = nlohmann::ordered_json::parse(line["messages"].dump());
    if (line.contains("tools")) chat.tools = nlohmann::ordered_json::parse(line["tools"].dump());
    chat.add_generation_prompt = Field<bool>(line, "add_generation_prompt", true);
    const std::string rendered = text.Template().Render(chat);
    return text.Tokenizer().Encode(rendered, /*add_special_tokens=*/false);
  }
  Fail("needs 'ids', 'prompt' or 'messages'");
}

engine::Request ParseRequest(const Json& line, TextTools& text, int64_t default_max_tokens,
                             int64_t* arrival_step, int64_t* cancel_step,
                             std::vector<std::string>* stop) {
  if (!line.is_object()) Fail("not a JSON object");
  engine::Request r;
  r.prompt = PromptIds(line, text);
  r.max_tokens = Field<int64_t>(line, "max_tokens", default_max_tokens);
  engine::SamplingParams& s = r.sampling;
  s.temperature = Field<float>(line, "temperature", 0.0f);
  s.top_k = Field<int32_t>(line, "top_k", 0);
  s.top_p = Field<float>(line, "top_p", 1.0f);
  s.min_p = Field<float>(line, "min_p", 0.0f);
  s.repetition_penalty = Field<float>(line, "repetition_penalty", 1.0f);
  s.presence_penalty = Field<float>(line, "presence_penalty", 0.0f);
  s.frequency_penalty = Field<float>(line, "frequency_penalty", 0.0f);
  if (line.contains("seed") && !line["seed"].is_null()) s.seed = Field<uint64_t>(line, "seed", 0);
  s.top_logprobs = Field<int32_t>(line, "logprobs", -1);
  s.n = Field<int32_t>(line, "n", 1);
  r.stop_token_ids = Field<std::vector<int32_t>>(line, "stop_token_ids", {});
  r.ignore_eos = Field<bool>(line, "ignore_eos", false);
  r.prompt_logprobs = Field<int32_t>(line, "prompt_logprobs", -1);
  *stop = StopStrings(line);
  if (!stop->empty()) text.Tokenizer();  // Stop strings need the text: fail now if it can't be had.
  *arrival_step = Field<int64_t>(line, "arrival_step", 0);
  *cancel_step = Field<int64_t>(line, "cancel_step", -1);
  return r;
}

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
  TextTools text_tools(options.tokenizer_dir.empty() ? options.model_dir : options.tokenizer_dir);
  std::vector<std::string> lines;
  std::string source = options.prompts_path;
  if (!options.prompts_path.empty()) {
    std::ifstream in(options.prompts_path);
    if (!in) Fail(options.prompts_path, ": cannot open");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  } else {
    // --prompt TEXT [--chat]: one request.
    Json line = options.chat ? Json{{"messages", {{{"role", "user"}, {"content", options.prompt_text}}}}}
                             : Json{{"prompt", options.prompt_text}};
    lines.push_back(line.dump());
    source = "--prompt";
  }
  std::vector<Job> jobs;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& text = lines[i];
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Job& job = jobs.emplace_back();
    try {
      job.request = ParseRequest(Json::parse(text), text_tools, options.max_tokens, &job.arrival_step,
                                 &job.cancel_step, &job.stop);
    } catch (const Json::exception& e) {
      job.error = StrCat(source, ":", i + 1, ": invalid JSON: ", e.what());
    } catch (const Error& e) {
      job.error = StrCat(source, ":", i + 1, ": ", e.what());
    }
  }

  std::unique_ptr<model::Model> m = model::LoadModel(options.model_dir, options.load);
  model::GenerationConfig gen = model::LoadGenerationConfig(options.model_dir, m->config());
  engine::Engine engine(std::move(m), std::move(gen), options.engine);

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
      if (job.arrival_step > step) {
        ++it;
        continue;
      }
      job.samples.resize(job.request.sampling.n);
      if (!job.stop.empty()) {
        for (Job::Sample& sample : job.samples) {
          sample.detokenizer = std::make_unique<tokenizer::StreamingDetokenizer>(
              text_tools.Tokenizer(), /*skip_special_tokens=*/true);
          sample.matcher = std::make_unique<server::StopStringMatcher>(job.stop);
        }
      }
      if (job.request.prompt_logprobs >= 0) job.prompt_logprobs.push_back(nullptr);
      auto on_output = [&job, &finished](const engine::RequestOutput& out) {
        Job::Sample& sample = job.samples[out.sample];
        for (const engine::PromptTokenLogprob& p : out.prompt_logprobs) {
          Json top = Json::array();
          for (const auto& alt : p.top) top.push_back({{"token", alt.token}, {"logprob", alt.logprob}});
          job.prompt_logprobs.push_back({{"token", p.token}, {"logprob", p.logprob}, {"top_logprobs", top}});
        }
        if (out.has_token && sample.stop_reason.empty()) {
          sample.ids.push_back(out.token);
          if (job.request.sampling.top_logprobs >= 0) {
            Json entry = {{"token", out.token}, {"logprob", out.logprob}};
            Json top = Json::array();
            for (const auto& alt : out.top_logprobs) top.push_back({{"token", alt.token}, {"logprob", alt.logprob}});
            entry["top_logprobs"] = top;
            sample.logprobs.push_back(entry);
          }
          if (sample.matcher) {
            sample.text += sample.matcher->Push(sample.detokenizer->Push(out.token));
            if (sample.matcher->stopped()) {
              sample.stop_reason = sample.matcher->matched();
              sample.finish = engine::FinishReason::kStop;
              ++job.stopped_by_text;
            }
          }
        }
        if (out.finish != engine::FinishReason::kNone) {
          if (sample.stop_reason.empty()) {
            sample.finish = out.finish;
            sample.error = out.error;
            FinishText(sample);
          }
          if (++job.done == static_cast<int32_t>(job.samples.size())) ++finished;
        }
      };
      try {
        job.id = engine.Submit(job.request, on_output);
      } catch (const Error& e) {
        job.error = e.what();
        ++finished;
      }
      it = pending.erase(it);
    }
    for (Job& job : jobs) {
      if (job.cancel_step == step && job.id >= 0) engine.Cancel(job.id);
      // Every sample ended on a stop string: the engine still runs them, so end the request (its
      // samples' callbacks then bring kCancelled, which they ignore, and free the blocks).
      const bool all_ended = std::all_of(job.samples.begin(), job.samples.end(), [](const Job::Sample& s) {
        return s.finish != engine::FinishReason::kNone;
      });
      if (job.id >= 0 && !job.cancel_sent && job.stopped_by_text > 0 && all_ended &&
          job.done < static_cast<int32_t>(job.samples.size())) {
        engine.Cancel(job.id);
        job.cancel_sent = true;
      }
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
      auto sample_json = [&](const Job::Sample& s) {
        nlohmann::ordered_json j = {{"ids", s.ids}};
        if (text_tools.has_tokenizer()) {
          j["text"] = text_tools.Tokenizer().Decode(s.ids, /*skip_special_tokens=*/true);
        }
        if (s.matcher) j["text"] = s.text;
        j["finish_reason"] = engine::FinishReasonName(s.finish);
        if (!s.stop_reason.empty()) j["stop_reason"] = s.stop_reason;
        if (job.request.sampling.top_logprobs >= 0) j["logprobs"] = s.logprobs;
        if (!s.error.empty()) j["error"] = s.error;
        return j;
      };
      if (job.request.prompt_logprobs >= 0) out["prompt_logprobs"] = job.prompt_logprobs;
      if (job.samples.size() == 1) {
        out.update(sample_json(job.samples[0]));
      } else {
        out["samples"] = nlohmann::ordered_json::array();
        for (const auto& s : job.samples) out["samples"].push_back(sample_json(s));
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
      {"cache_blocks", metrics.total_blocks},
      {"block_tokens", metrics.block_tokens},
      {"prefix_hit_tokens", metrics.prefix_hit_tokens},
      {"prefix_hit_rate", metrics.prompt_tokens ? static_cast<double>(metrics.prefix_hit_tokens) / metrics.prompt_tokens : 0.0},
      {"preemptions", metrics.preemptions},
      {"used_blocks_at_end", metrics.used_blocks},
  };
  std::cerr << "latent: summary " << summary.dump() << "\n";
  return 0;
}

}  // namespace latent::cli
