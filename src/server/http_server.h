// The HTTP side of `latent serve`, on cpp-httplib: routes, API-key check, body size limit,
// OpenAI-style JSON errors for everything refused, SSE streaming, and the drain at shutdown.
//
// Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, POST /tokenize,
// POST /detokenize (these need the API key when one is set), GET /health, GET /metrics.
//
// Each connection is served by one thread of a pool (`threads`, sized for many concurrent
// streams); a generation request's thread waits on its session, never on the engine, and a
// client that goes away mid-stream is noticed on the next write (tokens, or a keep-alive comment
// every 2 s while there are none) and its engine requests are cancelled.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "server/metrics.h"
#include "server/server_context.h"

namespace latent::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port (Bind() returns it).
  std::string api_key;  // Empty: no authentication.
  size_t max_body_bytes = size_t{8} << 20;
  int threads = 128;  // Connections served at once.
  int listen_backlog = 1024;
  bool log_requests = false;  // One stderr line per response.
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, std::string model_name, ServerMetrics& metrics);
  ~HttpServer();

  // Binds host:port; returns the port. Throws latent::Error when it cannot.
  int Bind();
  // Accepts and serves connections until the listening socket closes (StopAccepting() or
  // Stop()); returns once the connections' threads are done. Run it on its own thread.
  void Listen();

  // Until this is called, requests other than /health and /metrics get 503 "loading".
  void SetReady(const ServerContext* context);

  // Shutdown, step 1: closes the listening socket (new connections are refused) and answers 503
  // to new requests on open connections. Requests in flight go on.
  void StopAccepting();
  // Generation requests in flight.
  int InFlight() const;
  // Ends every generation request in flight with a 503 error (their engine requests are
  // cancelled); they finish within moments.
  void AbortAll(const std::string& message);
  // Stops the accept loop at once (only when StopAccepting() was not used).
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace latent::server
