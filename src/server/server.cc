#include "server/server.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/input_file.h"
#include "kernels/kernel_table.h"
#include "model/arch/registry.h"
#include "model/cache_rows.h"
#include "model/generation_config.h"
#include "model/model.h"
#include "engine/debug_replay.h"
#include "engine/distributed_model.h"
#include "parallel/communicator.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"
#include "server/tool_template.h"
#include "server/server_context.h"

namespace latent::server {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

template <typename... Args>
void Log(const Args&... args) {
  const std::string line = StrCat("latent serve: ", args..., "\n");
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

std::string Gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g GiB", bytes / double(1ull << 30));
  return buf;
}

std::string Size(double bytes) {
  char buf[32];
  if (bytes >= double(1ull << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / double(1ull << 30));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / double(1ull << 20));
  }
  return buf;
}

// What the signal thread tells the main thread.
struct SignalState {
  std::mutex mutex;
  std::condition_variable wake;
  int count = 0;
  int last = 0;
  bool loading = true;
};

SignalState& Signals() {
  static SignalState* state = new SignalState;  // Outlives the detached signal thread.
  return *state;
}

// Blocks SIGINT and SIGTERM in this thread and every thread started after, and handles them on a
// thread of their own: the first starts the drain, a second cuts it short. While the model loads,
// there is nothing to drain: the process exits at once (under mpirun it ends the job through
// MPI_Abort: the workers wait for its steps, and a rank that exits without finalizing MPI earns a
// page of mpirun's notices; never from this thread while the main thread is inside MPI, which
// runs at MPI_THREAD_SERIALIZED: parallel::AbortWorldFromAnotherThread). Under mpirun a signal
// from mpirun itself means another rank has exited or the job was interrupted: nothing can run a
// step any more, so rank 0 goes at once too, saying so, as the workers do
// (parallel::EndedByLauncher).
void HandleSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // A client gone mid-write is an error code, not a signal.
  std::thread([set] {
    for (;;) {
      siginfo_t info{};
      const int sig = sigwaitinfo(&set, &info);
      if (sig < 0) continue;
      const bool ranks = parallel::World().size() > 1;
      if (ranks && parallel::SentByLauncher(info.si_pid)) parallel::EndedByLauncher(sig);
      SignalState& s = Signals();
      std::lock_guard<std::mutex> lock(s.mutex);
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      if (s.loading && ranks) {
        parallel::AbortWorldFromAnotherThread(
            StrCat(name, " while loading the model: ending the job"), 128 + sig);
      }
      if (s.loading) {
        // 128 + the signal, as a shell reports a process the signal ended (and as the MPI path
        // above): the server never became ready, which must not read as a clean stop.
        Log(name, " while loading the model: exiting");
        std::_Exit(128 + sig);
      }
      ++s.count;
      s.last = sig;
      s.wake.notify_all();
    }
  }).detach();
}

// Reads the checkpoint's files once, with a progress bar, so the page cache holds them before
// the first request touches the mapped weights. Skipped when they would not fit in memory.
void PreloadWeights(const std::string& dir) {
  std::vector<fs::path> files;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec) || entry.path().extension() != ".safetensors") continue;
    const uintmax_t size = entry.file_size(ec);
    if (ec) continue;  // LoadModel reports unreadable files properly.
    files.push_back(entry.path());
    total += size;
  }
  std::sort(files.begin(), files.end());
  const double available = double(sysconf(_SC_AVPHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (total == 0) return;
  if (double(total) > available / 2) {
    Log("weights: ", Size(double(total)), " in ", files.size(),
        " files, more than half the free memory: mapped, read on first use");
    return;
  }
  const bool tty = ::isatty(STDERR_FILENO);
  const auto start = Clock::now();
  uint64_t done = 0;
  int last_reported = -1;
  auto report = [&](bool final) {
    const int percent = static_cast<int>(total ? 100 * done / total : 100);
    if (tty) {
      const int width = 30, filled = width * percent / 100;
      std::fprintf(stderr, "\rlatent serve: loading weights [%.*s%*s] %3d%% %s / %s", filled,
                   "##############################", width - filled, "", percent,
                   Size(double(done)).c_str(), Size(double(total)).c_str());
      if (final) std::fputc('\n', stderr);
      std::fflush(stderr);
    } else if (percent / 25 > std::max(last_reported, 0) / 25) {  // A line per quarter.
      Log("loading weights: ", percent, "% of ", Size(double(total)));
    }
    last_reported = std::max(last_reported, percent);
  };
  report(false);
  std::vector<char> buffer(size_t{16} << 20);
  for (const fs::path& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // LoadModel reports unreadable files properly.
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    ssize_t n;
    while ((n = ::read(fd, buffer.data(), buffer.size())) > 0) {
      done += static_cast<uint64_t>(n);
      report(false);
    }
    ::close(fd);
  }
  report(true);
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.2f s",
                std::chrono::duration<double>(Clock::now() - start).count());
  Log("weights: ", Size(double(total)), " in ", files.size(),
      files.size() == 1 ? " file" : " files", " read in ", seconds);
}

// The model and everything requests need, alive while the server is.
struct Loaded {
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<tokenizer::ChatTemplate> chat_template;
  std::unique_ptr<structured::LazyStructuredOutput> structured;
  ServerMetrics* metrics = nullptr;
  ServerContext context;
};

std::unique_ptr<Loaded> Load(const ServeOptions& o, const std::string& name,
                             ServerMetrics& metrics) {
  auto loaded = std::make_unique<Loaded>();
  // generation_config.json's sampling fields, read and checked (SamplingDefaults::Check) before
  // the weights: a bad one is named at once, not after minutes of loading. Every request that
  // leaves one of them out takes it.
  Json sampling_defaults = model::LoadSamplingDefaults(o.model_dir).AsFields();
  if (!sampling_defaults.empty()) {
    Log("sampling defaults from generation_config.json (for the fields a request leaves out): ",
        sampling_defaults.dump());
  }
  // --quantize int8 reads every converted tensor once at load and drops its pages: no preload.
  // Under mpirun each rank reads only its own experts' pages, as the forward touches them.
  if (o.load.quantize == model::WeightQuantization::kNone && parallel::World().size() == 1) {
    PreloadWeights(o.model_dir);
  }
  std::unique_ptr<model::Model> m = engine::LoadRankedModel(o.model_dir, o.load);
  Log("precision ", model::PrecisionName(m->precision()), " (--precision ",
      model::PrecisionName(o.load.precision), "), kernels ", kernels::BestKernelsName());
  const model::ModelConfig config = m->config();
  model::GenerationConfig generation = model::LoadGenerationConfig(o.model_dir, config);
  Log("model: ", o.model_dir, " (", config.model_type, ", ", config.num_hidden_layers,
      " layers, hidden ", config.hidden_size, ", vocab ", config.vocab_size, ", context ",
      config.max_position_embeddings, " tokens), served as '", name, "'");

  if (tokenizer::Tokenizer::DirHasTokenizer(o.model_dir)) {
    loaded->tokenizer =
        std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::FromDir(o.model_dir));
    try {
      loaded->chat_template = std::make_unique<tokenizer::ChatTemplate>(
          tokenizer::ChatTemplate::FromTokenizerDir(o.model_dir));
    } catch (const Error& e) {
      Log("no chat template (", e.what(), "): /v1/chat/completions answers 400");
    }
  } else {
    Log("no tokenizer.json or tiktoken.model: prompts must be token ids, and responses carry no "
        "text");
  }

  // The tokenizer's EOS ends a choice with a null stop_reason; the other EOS ids with their id.
  model::SetTokenizerEos(generation,
                         loaded->tokenizer ? loaded->tokenizer->eos_id() : std::nullopt);

  const std::string cache_dtype =
      model::CacheDTypeName(model::ParseCacheDType(o.engine.cache_dtype, config));
  std::string reasoning_parser = ResolveReasoningParser(
      o.reasoning_parser,
      loaded->chat_template != nullptr && loaded->chat_template->SourceMentions("</think>"));
  Log("reasoning parser: ", reasoning_parser.empty() ? "none" : reasoning_parser,
      o.reasoning_parser == "auto" ? " (auto, from the chat template)" : "");
  const tokenizer::ChatTemplate* chat = loaded->chat_template.get();
  std::string tool_call_parser = ResolveToolCallParser(
      o.tool_call_parser, model::ToolCallFormatFor(config.model_type),
      [chat](std::string_view text) { return chat != nullptr && chat->SourceMentions(text); });
  // Before the template is shared: the probe sets how each named template reads tool-call turns.
  const ToolTemplateShape tool_shape =
      loaded->chat_template ? ProbeToolTemplate(*loaded->chat_template) : ToolTemplateShape{};
  Log("tool-call parser: ", tool_call_parser.empty() ? "none" : tool_call_parser,
      o.tool_call_parser == "auto" ? " (auto, from the chat template and model type)" : "",
      "; the template reads tool-call arguments as ", ToolTemplateShapeText(tool_shape));
  engine::EngineOptions engine_options = o.engine;
  if (!o.debug_replay_path.empty()) {
    engine_options.debug_replay = engine::LoadDebugReplay(o.debug_replay_path, config.vocab_size);
    Log("--debug-replay ", o.debug_replay_path, ": every request emits its ",
        engine_options.debug_replay.size(), " token ids instead of sampling (test-only)");
  }
  loaded->structured = std::make_unique<structured::LazyStructuredOutput>(
      loaded->tokenizer.get(), config.vocab_size,
      generation.EndIds(config.vocab_size));
  loaded->engine =
      std::make_unique<engine::Engine>(std::move(m), std::move(generation), engine_options);
  const engine::EngineMetrics em = loaded->engine->Metrics();
  const int64_t cache_tokens = int64_t{em.total_blocks} * em.block_tokens;
  Log("cache: ", cache_tokens, " tokens (", em.total_blocks, " blocks of ", em.block_tokens, "), ",
      Gib(double(cache_tokens) * double(em.cache_bytes_per_token)), ", ", em.cache_bytes_per_token,
      " bytes per token (", cache_dtype, " rows, ", em.cache_layer_bytes_per_token,
      " per token in the widest layer), prefix caching ",
      o.engine.prefix_caching ? "on" : "off");
  if (loaded->engine->capacity_tokens() < cache_tokens) {
    Log("one request fits at most ", loaded->engine->capacity_tokens(),
        " tokens of it (the rest is held back for the sliding-window rows of two windows)");
  }
  if (o.engine.speculative_tokens > 0) {
    Log("speculative decoding: up to ", o.engine.speculative_tokens,
        " prompt-lookup draft tokens per sequence and step (n-grams of ",
        o.engine.speculative_ngram_min, " to ", o.engine.speculative_ngram_max, " tokens)");
  }

  ServerContext& ctx = loaded->context;
  ctx.engine = loaded->engine.get();
  ctx.tokenizer = loaded->tokenizer.get();
  ctx.chat_template = loaded->chat_template.get();
  ctx.structured = loaded->structured.get();
  ctx.metrics = &metrics;
  ctx.reasoning_parser = std::move(reasoning_parser);
  ctx.tool_call_parser = std::move(tool_call_parser);
  if (loaded->tokenizer && !ctx.reasoning_parser.empty()) {
    const auto marker_token = [&](std::string_view marker, int32_t* token) {
      const std::vector<int32_t> ids = loaded->tokenizer->Encode(marker, false);
      if (ids.size() == 1) {
        *token = ids[0];
        // Dropped by skip_special_tokens, it would never reach the parser, while a grammar
        // switches on its id: the answer would be filed as reasoning.
        if (loaded->tokenizer->IsSpecial(ids[0])) ctx.reasoning_marker_tokens.push_back(ids[0]);
      } else {
        Log("the tokenizer splits ", marker, " into ", ids.size(), " tokens: chat requests with "
            "a grammar that may reason first are refused (400) where it must mark the reasoning");
      }
    };
    marker_token(ReasoningEndMarker(), &ctx.reasoning_end_token);
    marker_token(ReasoningStartMarker(), &ctx.reasoning_start_token);
    std::sort(ctx.reasoning_marker_tokens.begin(), ctx.reasoning_marker_tokens.end());
    if (!ctx.reasoning_marker_tokens.empty()) {
      Log("reasoning markers the tokenizer marks special (kept in the output of chat "
          "requests): ", ctx.reasoning_marker_tokens.size());
    }
  }
  if (loaded->tokenizer) {
    for (const std::string& marker : ToolCallMarkers(ctx.tool_call_parser)) {
      const std::vector<int32_t> ids = loaded->tokenizer->Encode(marker, false);
      if (ids.size() == 1 && loaded->tokenizer->IsSpecial(ids[0])) {
        ctx.tool_marker_tokens.push_back(ids[0]);
      }
    }
    std::sort(ctx.tool_marker_tokens.begin(), ctx.tool_marker_tokens.end());
    if (!ctx.tool_marker_tokens.empty()) {
      Log("tool-call markers the tokenizer marks special (kept in the output of requests with "
          "tools): ", ctx.tool_marker_tokens.size());
    }
  }
  ctx.limits.model_name = name;
  ctx.limits.context_tokens = config.max_position_embeddings;
  // What Engine::Submit takes, not the blocks' tokens: with sliding-window rows it is less, and a
  // default max_tokens sized by the blocks would be refused as never fitting.
  ctx.limits.cache_tokens = loaded->engine->capacity_tokens();
  ctx.limits.vocab_size = config.vocab_size;
  ctx.limits.sampling_defaults = std::move(sampling_defaults);
  loaded->engine->Start();
  return loaded;
}

}  // namespace

int RunServer(const ServeOptions& o) {
  std::string name = o.served_model_name;
  if (name.empty()) {
    name = o.model_dir;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
  }
  if (!IsDirectory("--model", o.model_dir)) Fail("--model ", o.model_dir, ": no such directory");
  // Under mpirun only rank 0 serves HTTP; the others run its steps (and never return here).
  if (parallel::World().rank() != 0) engine::LoadRankedModel(o.model_dir, o.load);
  HandleSignals();
  ServerMetrics metrics;
  // Before the server, so destroyed after it: its connections' sessions and its workers' queued
  // jobs still reach the engine (stopped by then, but there) as they end.
  std::unique_ptr<Loaded> loaded;
  HttpServer http(o.http, name, metrics);
  const int port = http.Bind();
  Log("listening on http://", o.http.host, ":", port,
      " (/health answers 503 until the model is loaded)");
  std::atomic<bool> listening_done{false};
  std::thread listener([&] {
    http.Listen();
    listening_done = true;
  });

  try {
    loaded = Load(o, name, metrics);
  } catch (const std::exception& e) {
    http.Stop();
    listener.join();
    if (dynamic_cast<const Error*>(&e)) throw;
    Fail("loading ", o.model_dir, ": ", e.what());
  }
  SignalState& signals = Signals();
  {
    std::lock_guard<std::mutex> lock(signals.mutex);
    signals.loading = false;
  }
  http.SetReady(&loaded->context);
  Log("ready: http://", o.http.host, ":", port, "/v1 (",
      o.http.api_key.empty() ? "no API key" : "API key required", ")");

  std::unique_lock<std::mutex> lock(signals.mutex);
  signals.wake.wait(lock, [&] { return signals.count > 0; });
  lock.unlock();

  // Drain: stop accepting, give requests in flight a bounded time, then cancel the rest.
  const char* signal_name = signals.last == SIGINT ? "SIGINT" : "SIGTERM";
  Log(signal_name, ": stopping: no new connections; requests in flight (", http.InFlight(),
      ") get up to ", o.shutdown_timeout_s, " s to finish (a second signal cancels them now)");
  http.StopAccepting();
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(o.shutdown_timeout_s));
  auto forced = [&] {
    std::lock_guard<std::mutex> l(signals.mutex);
    return signals.count > 1;
  };
  while (http.InFlight() > 0 && Clock::now() < deadline && !forced()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (const int left = http.InFlight(); left > 0) {
    Log("cancelling the requests still in flight (", left, ")");
    http.AbortAll("the server is shutting down");
    const auto abort_deadline = Clock::now() + std::chrono::seconds(5);
    while (http.InFlight() > 0 && Clock::now() < abort_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  loaded->engine->Stop();
  // The event loop ends by itself once every connection is closed (idle ones were closed when the
  // drain began). A client still sending half a request, or slow to read the end of its stream,
  // gets half a second; then the loop stops and the rest are closed.
  const auto listen_deadline = Clock::now() + std::chrono::milliseconds(500);
  while (!listening_done && Clock::now() < listen_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!listening_done) {
    Log("closing the connections left");
    http.Stop();
  }
  listener.join();
  Log("stopped");
  return 0;
}

}  // namespace latent::server
