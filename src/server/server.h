// `latent serve`: binds the address, loads the model (answering /health with 503 meanwhile),
// serves the OpenAI API until SIGINT or SIGTERM, then drains: the listening socket closes,
// requests in flight get `shutdown_timeout_s` to finish, the rest are cancelled, and the
// process exits 0.
#pragma once

#include <string>

#include "engine/engine.h"
#include "model/load_options.h"
#include "server/http_server.h"

namespace latent::server {

struct ServeOptions {
  std::string model_dir;
  std::string served_model_name;  // Empty: model_dir as given.
  HttpOptions http;
  engine::EngineOptions engine;
  model::LoadOptions load;  // --quantize
  double shutdown_timeout_s = 10;
  // --reasoning-parser: auto, none or a name (server/reasoning_parser.h).
  std::string reasoning_parser = "auto";
  // --tool-call-parser: auto, none or a name (server/tool_call_parser.h).
  std::string tool_call_parser = "auto";
  // --debug-replay (test-only): a JSON file of token ids every request emits instead of sampling
  // (engine/debug_replay.h); empty: off.
  std::string debug_replay_path;
};

// Serves until a signal; returns the exit code. Throws latent::Error when it cannot start.
int RunServer(const ServeOptions& options);

}  // namespace latent::server
