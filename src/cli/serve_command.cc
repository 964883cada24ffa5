// `latent serve --model DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY]
// [--allowed-origins '*'] [--served-model-name NAME] [engine flags]`: the OpenAI-compatible HTTP
// server (src/server/).
#include <memory>

#include "generate/attention_form.h"
#include "cli/commands.h"
#include "cli/load_options.h"
#include "cli/speculative_options.h"
#include "cli/validators.h"
#include "base/error.h"
#include "server/cors.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"
#include "server/server.h"

namespace latent::cli {
namespace {

// The bounds of serve's sizes and times, checked as the flags are read: a body limit under 1 KiB
// would answer every request 413, and a timeout past what the clock's durations hold (about 292
// years in nanoseconds) would overflow into one that has already passed.
constexpr double kMinBodyMib = 1.0 / 1024, kMaxBodyMib = 1 << 20;  // 1 KiB to 1 TiB
constexpr double kMaxHeaderKib = 1 << 20;                         // 1 GiB
constexpr double kMinTimeoutSeconds = 1e-3, kMaxTimeoutSeconds = 1e7;  // 1 ms to 115 days
constexpr int kMaxHttpThreads = 1024;

Runner RegisterServe(CLI::App& app) {
  struct Options {
    server::ServeOptions serve;
    std::string attention = "auto";
    bool no_prefix_cache = false;
    double max_body_mib = 8;
    double max_header_kib = 64;
    std::string allowed_origins = "*";
    LoadFlags load_flags;  // --quantize, --precision
  };
  auto opt = std::make_shared<Options>();
  server::ServeOptions& s = opt->serve;
  CLI::App* sub = app.add_subcommand("serve", "Serve the OpenAI API (completions, chat) over HTTP");
  sub->add_option("--model", s.model_dir, "Hugging Face checkpoint directory")->required();
  sub->add_option("--host", s.http.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", s.http.port, "Port to listen on (0: any free port)")
      ->capture_default_str()
      ->check(Between(s.http.port, 0, 65535));
  sub->add_option("--api-key", s.http.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/..., /tokenize and /detokenize");
  sub->add_option("--allowed-origins", opt->allowed_origins,
                  "Web page origins a browser may call the API from (CORS): comma-separated or "
                  "a JSON list, e.g. https://app.example.com; '*': any; '': none")
      ->capture_default_str();
  sub->add_option("--served-model-name", s.served_model_name,
                  "The model name clients use (default: --model as given)");
  sub->add_option("--max-batch-tokens", s.engine.max_batch_tokens, "Token budget per step")
      ->capture_default_str()
      ->check(Positive(s.engine.max_batch_tokens));
  sub->add_option("--max-seqs", s.engine.max_seqs, "Sequences per step at most")
      ->capture_default_str()
      ->check(Positive(s.engine.max_seqs));
  sub->add_option("--block-tokens", s.engine.block_tokens, "Tokens per cache block")
      ->capture_default_str()
      ->check(Positive(s.engine.block_tokens));
  sub->add_option("--num-blocks", s.engine.num_blocks,
                  "Cache blocks (default: from --cache-memory)")
      ->check(Positive(s.engine.num_blocks));
  sub->add_option("--cache-memory", s.engine.cache_memory_gib, "Cache size in GiB")
      ->capture_default_str()
      ->check(Positive(s.engine.cache_memory_gib));
  sub->add_option("--cache-dtype", s.engine.cache_dtype, "auto, f32, bf16 or fp8 (FlashMLA's e4m3 latent rows)")
      ->capture_default_str();
  sub->add_flag("--no-prefix-cache", opt->no_prefix_cache, "Do not reuse cached prompt blocks");
  AddSpeculativeOptions(sub, s.engine);
  sub->add_option("--attention", opt->attention, "auto, absorbed or expanded")
      ->capture_default_str();
  sub->add_flag("--check-invariants", s.engine.check_invariants,
                "Verify block accounting after every step (tests)");
  sub->add_option("--max-request-mib", opt->max_body_mib,
                  "Largest request body, in MiB, from 1/1024 (1 KiB) to 1048576 (larger: 413)")
      ->capture_default_str()
      ->check(Between(opt->max_body_mib, kMinBodyMib, kMaxBodyMib));
  sub->add_option("--http-threads", s.http.threads,
                  StrCat("Worker threads that parse, tokenize and submit requests, at most ",
                         kMaxHttpThreads, " (connections need no thread; 0: one per core, at "
                         "least 2 and at most 16)"))
      ->capture_default_str()
      ->check(NonNegative(s.http.threads, kMaxHttpThreads));
  sub->add_option("--max-connections", s.http.max_connections,
                  "Open connections at most (more: 503 and close)")
      ->capture_default_str()
      ->check(Positive(s.http.max_connections));
  sub->add_option("--max-pending", s.http.max_pending,
                  "Requests waiting for a worker thread at most (more: 503)")
      ->capture_default_str()
      ->check(Positive(s.http.max_pending));
  sub->add_option("--max-waiting", s.http.max_waiting,
                  "Generation requests waiting for the engine (no token yet) at most (more: 503 "
                  "with Retry-After)")
      ->capture_default_str()
      ->check(Positive(s.http.max_waiting));
  sub->add_option("--header-timeout", s.http.header_timeout_s,
                  "Seconds from a request's first byte to the end of its headers (later: 408)")
      ->capture_default_str()
      ->check(Between(s.http.header_timeout_s, kMinTimeoutSeconds, kMaxTimeoutSeconds));
  sub->add_option("--body-timeout", s.http.body_timeout_s,
                  "Seconds from the end of the headers to the end of the body (later: 408)")
      ->capture_default_str()
      ->check(Between(s.http.body_timeout_s, kMinTimeoutSeconds, kMaxTimeoutSeconds));
  sub->add_option("--keep-alive-timeout", s.http.keep_alive_timeout_s,
                  "Seconds an idle connection is kept between requests")
      ->capture_default_str()
      ->check(Between(s.http.keep_alive_timeout_s, kMinTimeoutSeconds, kMaxTimeoutSeconds));
  sub->add_option("--write-timeout", s.http.write_timeout_s,
                  "Seconds a client may leave a response unread before it is cut")
      ->capture_default_str()
      ->check(Between(s.http.write_timeout_s, kMinTimeoutSeconds, kMaxTimeoutSeconds));
  sub->add_option("--max-header-kib", opt->max_header_kib,
                  "Largest request line and headers, in KiB, from 1 to 1048576 (larger: 431)")
      ->capture_default_str()
      ->check(Between(opt->max_header_kib, 1, kMaxHeaderKib));
  sub->add_option("--shutdown-timeout", s.shutdown_timeout_s,
                  "Seconds requests in flight get to finish after SIGINT/SIGTERM")
      ->capture_default_str()
      ->check(Between(s.shutdown_timeout_s, 0, kMaxTimeoutSeconds));
  sub->add_flag("--log-requests", s.http.log_requests, "Log every HTTP response on stderr");
  sub->add_option("--reasoning-parser", s.reasoning_parser,
                  StrCat("Split chat output into message.reasoning_content and content: auto "
                         "(from the chat template: 'think' when it knows </think>), none, or one "
                         "of ", server::ReasoningParserNames()))
      ->capture_default_str();
  sub->add_option("--tool-call-parser", s.tool_call_parser,
                  StrCat("Turn the model's tool-call markup into OpenAI tool_calls when a chat "
                         "request has tools (and tool_choice is not none): auto (from the chat "
                         "template's markup, else the model type), none, or one of ",
                         server::ToolCallParserNames()))
      ->capture_default_str();
  sub->add_option("--debug-replay", s.debug_replay_path,
                  "TEST-ONLY: every request emits the token ids in FILE (a JSON list of ids, or "
                  "{\"ids\": [...]}) instead of sampling, then finishes 'stop' ('length' at "
                  "max_tokens); prefill, batching, streaming and stop strings run as usual")
      ->option_text("FILE");
  AddLoadOptions(sub, opt->load_flags);
  return [opt] {
    server::ServeOptions serve = opt->serve;
    serve.load = ParseLoadOptions(opt->load_flags);
    // An unknown parser name fails now, not after the model has loaded.
    server::ResolveReasoningParser(serve.reasoning_parser, /*template_mentions_think=*/false);
    server::ResolveToolCallParser(serve.tool_call_parser, "", nullptr);
    serve.engine.attention = generate::ParseAttentionForm(opt->attention);
    serve.engine.prefix_caching = !opt->no_prefix_cache;
    serve.http.max_body_bytes = static_cast<size_t>(opt->max_body_mib * (1 << 20));
    serve.http.max_header_bytes = static_cast<size_t>(opt->max_header_kib * (1 << 10));
    serve.http.cors.allowed_origins = server::ParseAllowedOrigins(opt->allowed_origins);
    return server::RunServer(serve);
  };
}

}  // namespace

LATENT_COMMAND(5, RegisterServe);

}  // namespace latent::cli
