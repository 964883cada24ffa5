// The HTTP side of `latent serve`: an event-driven HTTP/1.1 server of its own (one epoll loop
// thread over non-blocking sockets, plus a few worker threads), with the routes, API-key check,
// body size limit, OpenAI-style JSON errors for everything refused, SSE streaming, and the drain
// at shutdown.
//
// Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id},
// POST /tokenize, POST /detokenize (these need the API key when one is set), GET /health,
// GET and POST /ping (the same as /health, for SageMaker), GET /version, GET /metrics; HEAD on
// every GET route; CORS preflights (OPTIONS) on any path, answered before the API key check
// (cors.h).
//
// A connection needs no thread: the loop reads requests, answers the quick routes (/health,
// /v1/models, errors) itself, hands parsing, tokenization and submission to the workers, and
// writes a session's SSE chunks when the engine's callback wakes it. So thousands of streams and
// idle keep-alive connections cost a socket each. Slow clients are bounded by the header, body,
// keep-alive and write timeouts; a client that hangs up is seen at once (EPOLLRDHUP), and its
// engine requests are cancelled. Back-pressure: past max_waiting generation requests without a
// first token, or max_pending requests waiting for a worker, or max_connections open sockets,
// new requests get 503 with Retry-After at once. Every connection is a descriptor: Bind() fits
// max_connections under the open-file limit (file_limit.h), and a connection that finds the
// descriptors gone anyway is still answered 503 and closed, through a spare descriptor.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "server/cors.h"
#include "server/metrics.h"
#include "server/server_context.h"

namespace latent::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port (Bind() returns it).
  std::string api_key;  // Empty: no authentication.
  CorsPolicy cors;      // Which web pages' origins may call the API from a browser.
  size_t max_body_bytes = size_t{8} << 20;
  size_t max_header_bytes = size_t{64} << 10;  // Request line and headers (larger: 431).
  int threads = 0;  // Worker threads (JSON, tokenization, submission); 0: one per core, >= 2.
  int listen_backlog = 1024;
  // Open connections at most; past it, 503 and close. Bind() lowers it, with a warning, where the
  // open-file limit has no room for that many.
  int max_connections = 4096;
  int max_pending = 1024;      // Requests waiting for a worker thread; past it, 503.
  int max_waiting = 1024;      // Generation requests admitted without a first token; past it, 503.
  double header_timeout_s = 10;      // From a request's first byte to the end of its headers.
  double body_timeout_s = 30;        // From the end of the headers to the end of the body.
  double keep_alive_timeout_s = 30;  // An idle connection between requests.
  double write_timeout_s = 30;       // A response's bytes not taken by the client for this long.
  bool log_requests = false;  // One stderr line per response.
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, std::string model_name, ServerMetrics& metrics);
  ~HttpServer();

  // Binds host:port; returns the port. Throws latent::Error when it cannot, or when the open-file
  // limit leaves no room for a connection.
  int Bind();
  // Runs the event loop: accepts and serves connections until Stop(), or after StopAccepting()
  // until every connection is closed. Run it on its own thread.
  void Listen();

  // Until this is called, requests other than /health and /metrics get 503 "loading".
  void SetReady(const ServerContext* context);

  // Shutdown, step 1: closes the listening socket (new connections are refused) and answers 503
  // to new requests on open connections. Requests in flight go on.
  void StopAccepting();
  // Generation requests in flight (admitted, from parsing to the end of the response).
  int InFlight() const;
  // Ends every generation request in flight with a 503 error (their engine requests are
  // cancelled, those waiting for their grammar's compile stop waiting), and those that start
  // later as they start; they finish within moments.
  void AbortAll(const std::string& message);
  // Stops the accept loop at once (only when StopAccepting() was not used).
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace latent::server
