// latent._latent: the engine in the Python process (nanobind). One `Engine` object owns a loaded
// model and a running engine thread; Python submits request lines (the JSON objects of
// `latent generate --prompts`, parsed by the same code) and waits for them with the GIL released.
// The Python package (latent/__init__.py) builds the vLLM-style API on top.
//
// Threads: the engine thread runs steps and calls OnOutput, which updates the request's
// RequestJob under `mutex_` and wakes waiters. Python threads submit, wait (GIL released,
// bounded slices so Ctrl-C is seen between them), read results and cancel.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/error.h"
#include "base/input_file.h"
#include "generate/attention_form.h"
#include "engine/engine.h"
#include "engine/environment_check.h"
#include "engine/request_fields.h"
#include "generate/request_job.h"
#include "generate/request_line.h"
#include "model/generation_config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#if LATENT_WITH_XGRAMMAR
#include "structured/structured_output.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace latent::python {
namespace {

struct EngineArgs {
  std::string quantize = "none";
  std::string precision = "auto";
  std::string attention = "auto";
  engine::EngineOptions engine;
};

// One submitted request as the Python side sees it.
struct Tracked {
  std::unique_ptr<generate::RequestJob> job;
  int64_t engine_id = -1;
  bool done = false;
  uint64_t events = 0;  // Bumped at every event: streaming waits for it to move.
  // Streaming reads of sample 0: how much has been handed out.
  size_t streamed_tokens = 0;
  size_t streamed_text = 0;
  int64_t cached_tokens = -1;  // Prompt tokens the prefix cache held (sample 0's first token).
};

// Submit's default_max_tokens for "as many as the context leaves after the prompt" (vLLM's
// max_tokens=None); a line's own max_tokens is then capped at that room (vLLM's LLM).
constexpr int64_t kMaxTokensToContext = -1;

class PyEngine {
 public:
  PyEngine(const std::string& model_dir, const std::string& tokenizer_dir, const EngineArgs& args)
      : text_(tokenizer_dir.empty() ? model_dir : tokenizer_dir) {
    const std::string tok_dir = tokenizer_dir.empty() ? model_dir : tokenizer_dir;
    // The environment's settings, read strictly as `latent`'s main reads them (the same list):
    // LATENT_PROFILE was read when the module loaded, where an error could not be raised, and
    // LATENT_ROWS_GATHER would be read at the first request.
    engine::CheckEnvironment();
    if (!IsDirectory("model", model_dir)) Fail(model_dir, ": not a directory");
    if (!tokenizer_dir.empty()) tokenizer::Tokenizer::CheckNamedDir(tokenizer_dir);
    // Read and checked (SamplingDefaults::Check) before the weights, as the server and `latent
    // generate` do: a bad field is named at once, not after the model has loaded.
    sampling_defaults_ = model::LoadSamplingDefaults(model_dir);
    model::LoadOptions load;
    load.quantize = model::ParseWeightQuantization(args.quantize);
    load.precision = model::ParsePrecision(args.precision);
    engine::EngineOptions options = args.engine;
    options.attention = generate::ParseAttentionForm(args.attention);
    {
      nb::gil_scoped_release release;
      std::unique_ptr<model::Model> m = model::LoadModel(model_dir, load);
      precision_ = m->precision();
      model::GenerationConfig gen = model::LoadGenerationConfig(model_dir, m->config());
      vocab_size_ = m->config().vocab_size;
      // Loaded now, not on first use: several Python threads may submit text prompts at once;
      // and before the engine, which takes its EOS (it ends a sample with no stop_reason, the
      // other EOS ids with their id; without a tokenizer every EOS id gives its id).
      has_tokenizer_ = tokenizer::Tokenizer::DirHasTokenizer(tok_dir);  // tokenizer.json, tiktoken
      model::SetTokenizerEos(gen, has_tokenizer_ ? text_.Tokenizer().eos_id() : std::nullopt);
      eos_ids_ = gen.EndIds(vocab_size_);
      engine_ = std::make_unique<engine::Engine>(std::move(m), std::move(gen), options);
      // The server's limits (server.cc): prompt + completion fit both.
      context_tokens_ = engine_->config().max_position_embeddings;
      cache_tokens_ = engine_->capacity_tokens();
    }
    engine_->Start();
  }

  ~PyEngine() { Close(); }

  // Stops the engine thread; the requests it left unfinished end with an error. A second call
  // (or one racing the first) does nothing.
  int waiting() const { return waiting_.load(); }

  void Close() {
    // Taken while the GIL is held: the other methods read engine_ under the GIL, so from here
    // on they see the LLM closed and never the engine that is being stopped.
    std::unique_ptr<engine::Engine> engine = std::move(engine_);
    if (!engine) return;
    nb::gil_scoped_release release;
    engine->Stop();
    engine.reset();
    // The engine reports nothing more: without an end, their waiters would wait forever.
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [handle, t] : tracked_) {
      if (t->done) continue;
      t->job->Abandon("this LLM was closed while the request ran");
      t->done = true;
      ++t->events;
    }
    changed_.notify_all();
  }

  // Parses and submits one request line; returns its handle. `default_max_tokens` applies to a
  // line without max_tokens; kMaxTokensToContext: as many as the context leaves (the server's
  // default for chat completions), and a line's max_tokens capped at that (MaxTokensToContext).
  int64_t Submit(const std::string& line_json, int64_t default_max_tokens, bool stream_text) {
    // Held under the GIL to the end, as engine_ is, so Close cannot take it away meanwhile.
    engine::Engine& engine = Engine();
    const generate::RequestJson line = generate::ParseRequestLineJson(line_json);
    std::lock_guard<std::mutex> parse_lock(parse_mutex_);  // The chat template loads on first use.
    auto tracked = std::make_shared<Tracked>();
    const bool to_context = default_max_tokens == kMaxTokensToContext;
    generate::RequestLine parsed =
        generate::ParseRequestLine(line, text_, to_context ? 0 : default_max_tokens);
    const bool max_tokens_given = line.contains("max_tokens") && !line["max_tokens"].is_null();
    if (parsed.truncate_prompt_tokens) {
      // The server's rule (MakeEngineRequest): the room is the context less max_tokens, 0 for
      // max_tokens=None (vLLM's `max_tokens or 0`).
      const int64_t most = max_tokens_given ? parsed.request.max_tokens : 0;
      if (const std::optional<std::string> error =
              engine::TruncatePrompt(parsed.request.prompt, *parsed.truncate_prompt_tokens, most,
                                     context_tokens_)) {
        Fail("field 'truncate_prompt_tokens' ", *error);
      }
    }
    if (to_context) {
      engine::Request& r = parsed.request;
      const std::optional<int64_t> asked =
          max_tokens_given ? std::optional<int64_t>(r.max_tokens) : std::nullopt;
      r.max_tokens = MaxTokensToContext(r.prompt.size(), asked);
      // The context's end wins over min_tokens, by latent's choice: a min_tokens past the room
      // left is the room, not a refusal of the request (SamplingParams checked it against
      // max_tokens). vLLM since PR #26317 (v1/core/sched/utils.py check_stop) looks at min_tokens
      // first, so such a request there may run on without an end; latent ends it at the context.
      r.min_tokens = std::min(r.min_tokens, r.max_tokens);
    }
    // Ranked as the server ranks its prompt_logprobs (vLLM's Logprob.rank).
    parsed.request.prompt_ranks = parsed.request.prompt_logprobs >= 0;
    tracked->job = std::make_unique<generate::RequestJob>(std::move(parsed), text_,
                                                          stream_text && has_tokenizer_);
    if (tracked->job->line().output.active()) {
      tracked->job->SetConstraint(StructuredConstraint(tracked->job->line().output));
    }
    const int64_t handle = next_handle_++;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tracked_[handle] = tracked;
    }
    // Runs on the engine's own thread, so `engine` outlives every call; engine_ may already be
    // taken by Close, and tracked->engine_id is set only after Submit returns, which can be
    // after the request's first events.
    auto on_output = [this, tracked, engine = &engine](const engine::RequestOutput& out) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (tracked->job->OnOutput(out)) tracked->done = true;
      if (out.has_token && out.sample == 0 && out.cached_prompt_tokens >= 0) {
        tracked->cached_tokens = out.cached_prompt_tokens;
      }
      ++tracked->events;
      if (tracked->job->TakeCancelNeeded()) engine->Cancel(out.request_id);
      changed_.notify_all();
    };
    try {
      const int64_t id = engine.Submit(tracked->job->request(), on_output);
      std::lock_guard<std::mutex> lock(mutex_);
      tracked->engine_id = id;
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      tracked_.erase(handle);
      throw;
    }
    return handle;
  }

  // Waits up to `timeout_s` for all of `handles` to finish; true when they have.
  bool Wait(const std::vector<int64_t>& handles, double timeout_s) {
    std::vector<std::shared_ptr<Tracked>> items;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int64_t h : handles) items.push_back(Find(h));
    }
    const Waiting waiting(waiting_);  // ends after the release below has taken the GIL back
    nb::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, Seconds(timeout_s), [&] {
      for (const auto& t : items) {
        if (!t->done) return false;
      }
      return true;
    });
  }

  // Waits up to `timeout_s` for news on one request (a token or its end); returns what is new
  // for sample 0 since the last call: (token ids, logprob entries, text, finish reason or "",
  // stop_reason: None until the request is done, as vLLM's streamed outputs).
  nb::tuple Poll(int64_t handle, double timeout_s) {
    std::shared_ptr<Tracked> t;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      t = Find(handle);
    }
    std::vector<int32_t> ids;
    std::vector<engine::RequestOutput> logprobs;
    std::string text;
    std::string finish;
    std::string stop_string;  // the sample's stop_reason, once done
    int32_t stop_token = -1;
    {
      const Waiting waiting(waiting_);
      nb::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(mutex_);
      const auto& sample = t->job->samples()[0];
      changed_.wait_for(lock, Seconds(timeout_s), [&] {
        return t->done || sample.ids.size() > t->streamed_tokens || sample.text.size() > t->streamed_text;
      });
      ids.assign(sample.ids.begin() + t->streamed_tokens, sample.ids.end());
      if (sample.logprobs.size() > t->streamed_tokens) {
        logprobs.assign(sample.logprobs.begin() + t->streamed_tokens, sample.logprobs.end());
      }
      t->streamed_tokens = sample.ids.size();
      text = sample.text.substr(t->streamed_text);
      t->streamed_text = sample.text.size();
      if (t->done) finish = engine::FinishReasonName(sample.finish);
      if (t->done && !sample.error.empty()) finish = "error: " + sample.error;
      if (t->done) {
        stop_string = sample.stop_reason;
        stop_token = sample.stop_token;
      }
    }
    return nb::make_tuple(ids, LogprobList(logprobs), text, finish,
                          StopReason(stop_string, stop_token));
  }

  // The finished request: a list of samples, each (ids, text or None, finish_reason,
  // stop_reason (the stop string, the stop token id or None), logprobs or None, error).
  nb::list Result(int64_t handle) {
    std::shared_ptr<Tracked> t;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      t = Find(handle);
      if (!t->done) Fail("request ", handle, " has not finished");
    }
    nb::list out;
    for (const auto& s : t->job->samples()) {
      nb::object text = has_tokenizer_ ? nb::cast(t->job->Text(s)) : nb::none();
      nb::object logprobs = t->job->request().sampling.top_logprobs >= 0 ? nb::object(LogprobList(s.logprobs)) : nb::none();
      out.append(nb::make_tuple(s.ids, text, std::string(engine::FinishReasonName(s.finish)),
                                StopReason(s.stop_reason, s.stop_token), logprobs, s.error));
    }
    return out;
  }

  // The finished request's prompt logprobs (vLLM's form): None without "prompt_logprobs", else
  // None for the first prompt token, then (token, logprob, [(token, logprob), ...], rank, text)
  // per token.
  nb::object PromptLogprobs(int64_t handle) {
    std::shared_ptr<Tracked> t;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      t = Find(handle);
      if (!t->done) Fail("request ", handle, " has not finished");
    }
    if (t->job->request().prompt_logprobs < 0) return nb::none();
    nb::list out;
    out.append(nb::none());
    for (const engine::PromptTokenLogprob& p : t->job->prompt_logprobs()) {
      out.append(nb::make_tuple(p.token, p.logprob, TopList(p.top), p.rank, TokenText(p.token)));
    }
    return out;
  }

  std::vector<int32_t> PromptIds(int64_t handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    return Find(handle)->job->request().prompt;
  }

  // A "messages" request's prompt as the chat template rendered it; None for other requests.
  nb::object ChatPrompt(int64_t handle) {
    std::string text;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      text = Find(handle)->job->line().chat_prompt;
    }
    return text.empty() ? nb::none() : nb::cast(text);  // a rendered prompt is never empty
  }

  // Prompt tokens the prefix cache held, as the server's usage.prompt_tokens_details
  // .cached_tokens; None when the request generated no token (max_tokens 0, an error).
  nb::object CachedTokens(int64_t handle) {
    int64_t cached = -1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cached = Find(handle)->cached_tokens;
    }
    return cached < 0 ? nb::none() : nb::cast(cached);
  }

  // Ends a request early (no-op once finished).
  void Cancel(int64_t handle) {
    int64_t id = -1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = tracked_.find(handle);
      if (it == tracked_.end() || it->second->done) return;
      id = it->second->engine_id;
    }
    if (engine_ && id >= 0) engine_->Cancel(id);
  }

  // Forgets a request (cancelling it if it runs).
  void Release(int64_t handle) {
    Cancel(handle);
    std::lock_guard<std::mutex> lock(mutex_);
    tracked_.erase(handle);
  }

  std::vector<int32_t> Encode(const std::string& text, bool add_special_tokens) {
    return Tokenizer().Encode(text, add_special_tokens);
  }
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) {
    return Tokenizer().Decode(ids, skip_special_tokens);
  }
  // A chat request line's prompt text, as chat() renders it (generate::RenderChatLine: the
  // server's checks of the messages, tools, kwargs and prompt end).
  std::string RenderChat(const std::string& line_json) {
    // Depth-checked: deep JSON would overflow the stack where nlohmann copies it.
    const generate::RequestJson line = generate::ParseRequestLineJson(line_json);
    if (!line.is_object()) Fail("not a JSON object");
    std::lock_guard<std::mutex> parse_lock(parse_mutex_);  // The chat template loads on first use.
    return generate::RenderChatLine(line, text_);
  }

  nb::dict Metrics() {
    const engine::EngineMetrics m = Engine().Metrics();
    nb::dict d;
    d["running"] = m.running;
    d["waiting"] = m.waiting;
    d["total_blocks"] = m.total_blocks;
    d["used_blocks"] = m.used_blocks;
    d["cached_blocks"] = m.cached_blocks;
    d["block_tokens"] = m.block_tokens;
    d["cache_dtype"] = m.cache_dtype;
    d["cache_bytes_per_token"] = m.cache_bytes_per_token;
    d["cache_layer_bytes_per_token"] = m.cache_layer_bytes_per_token;
    d["requests_finished"] = m.requests_finished;
    d["prompt_tokens"] = m.prompt_tokens;
    d["prefix_hit_tokens"] = m.prefix_hit_tokens;
    d["generated_tokens"] = m.generated_tokens;
    d["preemptions"] = m.preemptions;
    d["draft_tokens"] = m.draft_tokens;
    d["accepted_draft_tokens"] = m.accepted_draft_tokens;
    d["steps"] = m.steps;
    d["busy_seconds"] = m.busy_seconds;
    return d;
  }

  nb::dict Config() {
    const model::ModelConfig& c = Engine().config();
    nb::dict d;
    d["model_type"] = c.model_type;
    d["vocab_size"] = c.vocab_size;
    d["hidden_size"] = c.hidden_size;
    d["num_hidden_layers"] = c.num_hidden_layers;
    d["max_position_embeddings"] = c.max_position_embeddings;
    d["eos_token_ids"] = eos_ids_;
    d["precision"] = model::PrecisionName(precision_);  // the linears' (auto resolved)
    return d;
  }

  bool has_tokenizer() const { return has_tokenizer_; }

  // generation_config.json's sampling fields under vLLM's SamplingParams names (max_new_tokens
  // as max_tokens), those the file sets, as JSON (model::SamplingDefaults::AsFields, as the
  // server and request lines take them): LLM reads them once, for get_default_sampling_params.
  std::string DefaultSampling() const { return sampling_defaults_.AsFields().dump(); }

 private:
  static std::chrono::duration<double> Seconds(double s) { return std::chrono::duration<double>(s < 0 ? 0 : s); }

  model::Precision precision_ = model::Precision::kF32;

  // max_tokens for a prompt of `n` tokens under kMaxTokensToContext, as vLLM's LLM: what the
  // context and the cache leave after it (`asked` absent: max_tokens=None), or `asked` capped at
  // that, so the sample ends there with finish_reason "length" (vLLM's scheduler ends a request
  // at max_model_len). A prompt that leaves no room is refused here, naming both limits, as vLLM
  // refuses a prompt of max_model_len tokens or more, rather than scored with max_tokens 0; only
  // max_tokens=0 (scoring) asks for no room, and Engine::Submit checks that the prompt fits.
  int64_t MaxTokensToContext(size_t prompt_tokens, std::optional<int64_t> asked) const {
    if (asked == 0) return 0;
    const auto n = static_cast<int64_t>(prompt_tokens);
    const int64_t room = std::min(context_tokens_, cache_tokens_);
    if (n > 0 && n >= room) {
      Fail(asked ? "" : "max_tokens=None: ", "the prompt is ", n,
           " tokens, which leaves no room for a completion (the model's maximum context length is ",
           context_tokens_, " tokens and the cache holds ", cache_tokens_, ")");
    }
    const int64_t left = std::max<int64_t>(room - n, 0);
    return asked ? std::min(*asked, left) : left;
  }

  engine::Engine& Engine() {
    if (!engine_) Fail("this LLM has been closed");
    return *engine_;
  }
  const tokenizer::Tokenizer& Tokenizer() {
    if (!has_tokenizer_) {
      Fail("this model has no tokenizer (tokenizer.json or tiktoken.model): use token ids");
    }
    return text_.Tokenizer();
  }
  // Under mutex_.
  std::shared_ptr<Tracked> Find(int64_t handle) {
    auto it = tracked_.find(handle);
    if (it == tracked_.end()) Fail("unknown request handle ", handle);
    return it->second;
  }
  static std::vector<std::pair<int32_t, float>> TopList(
      const std::vector<engine::TokenLogprob>& alternatives) {
    std::vector<std::pair<int32_t, float>> top;
    for (const auto& alt : alternatives) top.emplace_back(alt.token, alt.logprob);
    return top;
  }
  // vLLM's stop_reason: the stop string that ended the sample, else the stop token id (a
  // stop_token_ids entry or an extra EOS id), else None.
  static nb::object StopReason(const std::string& stop_string, int32_t stop_token) {
    if (!stop_string.empty()) return nb::cast(stop_string);
    if (stop_token >= 0) return nb::cast(stop_token);
    return nb::none();
  }

  // A token's text alone (special tokens kept), as vLLM's Logprob.decoded_token and the server's
  // prompt_logprobs give it; None without a tokenizer.
  nb::object TokenText(int32_t token) {
    if (!has_tokenizer_) return nb::none();
    const int32_t ids[1] = {token};
    return nb::cast(text_.Tokenizer().Decode(ids, /*skip_special_tokens=*/false));
  }

  // Generated tokens' logprob entries: (token, logprob, top, rank: None (the engine ranks prompt
  // tokens only), text).
  nb::list LogprobList(const std::vector<engine::RequestOutput>& events) {
    nb::list out;
    for (const auto& e : events) {
      out.append(nb::make_tuple(e.token, e.logprob, TopList(e.top_logprobs), nb::none(),
                                TokenText(e.token)));
    }
    return out;
  }

  // The grammar of a request's structured_outputs, over the model's vocabulary (parse_mutex_
  // held).
  std::shared_ptr<const engine::TokenConstraintFactory> StructuredConstraint(
      const structured::OutputSpec& spec) {
#if LATENT_WITH_XGRAMMAR
    if (!structured_) {
      if (!has_tokenizer_) {
        Fail("structured_outputs needs the model's tokenizer, and this model has none");
      }
      structured_ = std::make_unique<structured::LazyStructuredOutput>(
          &text_.Tokenizer(), vocab_size_, eos_ids_);
    }
    return structured_->Get().Constraint(spec);
#else
    (void)spec;
    Fail("structured_outputs needs XGrammar, which `pip install .` leaves out of latent's module "
         "(the module `make build` makes has it)");
#endif
  }

  generate::TextTools text_;
  bool has_tokenizer_ = false;
  std::vector<int32_t> eos_ids_;  // the ids that end a sample unless ignore_eos
  model::SamplingDefaults sampling_defaults_;
  int64_t vocab_size_ = 0;
  int64_t context_tokens_ = 0;  // max_position_embeddings
  int64_t cache_tokens_ = 0;    // Engine::capacity_tokens: what Submit takes
#if LATENT_WITH_XGRAMMAR
  std::unique_ptr<structured::LazyStructuredOutput> structured_;
#endif
  std::unique_ptr<engine::Engine> engine_;
  std::mutex parse_mutex_;
  // Threads in Wait or Poll with the GIL released, counted until they hold it again (waiting()).
  std::atomic<int> waiting_{0};
  struct Waiting {
    explicit Waiting(std::atomic<int>& n) : n_(n) { ++n_; }
    ~Waiting() { --n_; }
    std::atomic<int>& n_;
  };
  std::mutex mutex_;  // Guards tracked_ and every Tracked.
  std::condition_variable changed_;
  std::map<int64_t, std::shared_ptr<Tracked>> tracked_;
  int64_t next_handle_ = 0;
};

}  // namespace
}  // namespace latent::python

NB_MODULE(_latent, m) {
  using namespace latent::python;
  m.doc() = "latent's engine, in process (the API is latent.LLM; this module is its back end)";
  nb::exception<latent::Error> latent_error(m, "LatentError", PyExc_RuntimeError);
  // A failed check (a bug in latent, not the caller's input) as its own subclass, so that Python
  // tells the two apart as the server (500 against 400) and the CLI (exit 1 against 2) do. nanobind
  // tries the translators last registered first, so this one sees InternalError before Error's.
  nb::exception<latent::InternalError>(m, "LatentInternalError", latent_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const nlohmann::json::exception& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.def(
      "check_sampling",
      [](const std::string& line_json) {
        const latent::generate::RequestJson line =
            latent::generate::ParseRequestLineJson(line_json);
        latent::generate::ParseSamplingFields(line);
        latent::generate::ParsePromptLogprobs(line);
        latent::generate::CheckFieldsWithoutPrompt(line);
      },
      "line_json"_a,
      "Raises LatentError naming the field when a request line's sampling fields (prompt_logprobs, "
      "max_tokens, min_tokens, stop and stop_token_ids too) are out of range (what the engine "
      "would refuse at submit).");
  // No input reaches a failed check on purpose; the Python tests raise one here to see which
  // exception it becomes (LatentInternalError, never a ValueError or a plain LatentError).
  m.def("_fail_check_for_tests", [] { LATENT_CHECK(!"raised on purpose by latent's tests"); });
  m.attr("MAX_TOKENS_TO_CONTEXT") = kMaxTokensToContext;

  nb::class_<EngineArgs>(m, "EngineArgs")
      .def(nb::init<>())
      .def_rw("quantize", &EngineArgs::quantize)
      .def_rw("precision", &EngineArgs::precision)
      .def_rw("attention", &EngineArgs::attention)
      .def_prop_rw("max_batch_tokens", [](EngineArgs& a) { return a.engine.max_batch_tokens; },
                   [](EngineArgs& a, int64_t v) { a.engine.max_batch_tokens = v; })
      .def_prop_rw("max_seqs", [](EngineArgs& a) { return a.engine.max_seqs; },
                   [](EngineArgs& a, int32_t v) { a.engine.max_seqs = v; })
      .def_prop_rw("block_tokens", [](EngineArgs& a) { return a.engine.block_tokens; },
                   [](EngineArgs& a, uint32_t v) { a.engine.block_tokens = v; })
      .def_prop_rw("num_blocks", [](EngineArgs& a) { return a.engine.num_blocks; },
                   [](EngineArgs& a, int32_t v) { a.engine.num_blocks = v; })
      .def_prop_rw("cache_memory_gib", [](EngineArgs& a) { return a.engine.cache_memory_gib; },
                   [](EngineArgs& a, double v) { a.engine.cache_memory_gib = v; })
      .def_prop_rw("prefix_caching", [](EngineArgs& a) { return a.engine.prefix_caching; },
                   [](EngineArgs& a, bool v) { a.engine.prefix_caching = v; })
      .def_prop_rw("cache_dtype", [](EngineArgs& a) { return a.engine.cache_dtype; },
                   [](EngineArgs& a, const std::string& v) { a.engine.cache_dtype = v; })
      .def_prop_rw("speculative_tokens", [](EngineArgs& a) { return a.engine.speculative_tokens; },
                   [](EngineArgs& a, int32_t v) { a.engine.speculative_tokens = v; })
      .def_prop_rw("speculative_ngram_max",
                   [](EngineArgs& a) { return a.engine.speculative_ngram_max; },
                   [](EngineArgs& a, int32_t v) { a.engine.speculative_ngram_max = v; })
      .def_prop_rw("speculative_ngram_min",
                   [](EngineArgs& a) { return a.engine.speculative_ngram_min; },
                   [](EngineArgs& a, int32_t v) { a.engine.speculative_ngram_min = v; })
      .def_prop_rw("check_invariants", [](EngineArgs& a) { return a.engine.check_invariants; },
                   [](EngineArgs& a, bool v) { a.engine.check_invariants = v; });

  nb::class_<PyEngine>(m, "Engine")
      .def(nb::init<const std::string&, const std::string&, const EngineArgs&>(), "model_dir"_a,
           "tokenizer_dir"_a, "args"_a)
      .def("close", &PyEngine::Close,
           "Stops the engine thread; requests still running end with the error 'this LLM was "
           "closed while the request ran'. Later calls raise LatentError; a second close() does "
           "nothing.")
      .def("submit", &PyEngine::Submit, "line_json"_a, "default_max_tokens"_a, "stream_text"_a)
      .def("wait", &PyEngine::Wait, "handles"_a, "timeout_s"_a)
      .def("waiting", [](const PyEngine& e) { return e.waiting(); },
           "Threads waiting inside wait() or poll() (the GIL released) right now.")
      .def("poll", &PyEngine::Poll, "handle"_a, "timeout_s"_a)
      .def("result", &PyEngine::Result, "handle"_a)
      .def("prompt_ids", &PyEngine::PromptIds, "handle"_a)
      .def("chat_prompt", &PyEngine::ChatPrompt, "handle"_a)
      .def("cached_tokens", &PyEngine::CachedTokens, "handle"_a)
      .def("prompt_logprobs", &PyEngine::PromptLogprobs, "handle"_a)
      .def("cancel", &PyEngine::Cancel, "handle"_a)
      .def("release", &PyEngine::Release, "handle"_a)
      .def("encode", &PyEngine::Encode, "text"_a, "add_special_tokens"_a)
      .def("decode", &PyEngine::Decode, "ids"_a, "skip_special_tokens"_a)
      .def("render_chat", &PyEngine::RenderChat, "line_json"_a)
      .def("metrics", &PyEngine::Metrics)
      .def("config", &PyEngine::Config)
      .def("default_sampling", &PyEngine::DefaultSampling)
      .def_prop_ro("has_tokenizer", &PyEngine::has_tokenizer);
}
