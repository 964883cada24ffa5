#include "server/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <set>

#include "base/error.h"
#include "server/completion_session.h"

namespace latent::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(200);
// While a stream has nothing to send, a comment line this often finds out whether the client
// is still there (SSE clients ignore lines starting with ':').
constexpr auto kKeepAliveInterval = std::chrono::seconds(2);

void SendJson(httplib::Response& res, int status, const OrderedJson& body) {
  res.status = status;
  res.set_content(Dump(body), "application/json");
}

void SendError(httplib::Response& res, const ApiError& error) {
  if (error.status() == 401) res.set_header("WWW-Authenticate", "Bearer");
  SendJson(res, error.status(), ErrorJson(error));
}

// The message of an HTTP-level error that no handler wrote (httplib's own 400/404/413/414...).
std::string StatusMessage(const httplib::Request& req, int status, size_t max_body_bytes) {
  switch (status) {
    case 400:
      return "malformed HTTP request";
    case 404:
      return StrCat("no route for ", req.method, " ", req.path);
    case 405:
      return StrCat("method ", req.method, " is not allowed on ", req.path);
    case 413:
      return StrCat("the request body is larger than the limit of ", max_body_bytes, " bytes");
    case 414:
      return "the request URI is too long";
    case 431:
      return "the request headers are too large";
    default:
      return StrCat("HTTP error ", status);
  }
}

const char* StatusCode(int status) {
  switch (status) {
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 413:
      return "request_too_large";
    default:
      return "";
  }
}

// Compares without an early exit, so the time taken does not tell how much of a guess matched.
bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

struct HttpServer::Impl {
  HttpOptions options;
  std::string model_name;
  ServerMetrics& metrics;
  httplib::Server svr;
  int listen_fd = -1;
  int64_t started = static_cast<int64_t>(std::time(nullptr));
  std::atomic<const ServerContext*> context{nullptr};
  std::atomic<bool> draining{false};
  mutable std::mutex sessions_mutex;
  std::set<std::shared_ptr<CompletionSession>> sessions;

  Impl(HttpOptions o, std::string name, ServerMetrics& m)
      : options(std::move(o)), model_name(std::move(name)), metrics(m) {}

  void Routes();

  // Throws ApiError 401 unless the request carries the API key (when one is set).
  void CheckAuth(const httplib::Request& req) const {
    if (options.api_key.empty()) return;
    const std::string header = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (header.rfind(prefix, 0) != 0) {
      throw ApiError(401, "missing API key: send 'Authorization: Bearer <key>'", "",
                     "invalid_api_key");
    }
    if (!ConstantTimeEqual(header.substr(prefix.size()), options.api_key)) {
      throw ApiError(401, "invalid API key", "", "invalid_api_key");
    }
  }

  // The context once the model is loaded and while not draining; else ApiError 503.
  const ServerContext& Ready() const {
    if (draining) throw ApiError(503, "the server is shutting down", "", "server_shutting_down");
    const ServerContext* c = context.load();
    if (!c) throw ApiError(503, "the model is still loading", "", "model_loading");
    return *c;
  }

  // Reads the body through `reader`, at most max_body_bytes. Throws ApiError 413/400.
  std::string ReadBody(const httplib::Request& req, const httplib::ContentReader& reader) const {
    std::string body;
    bool too_large = false;
    const bool ok = reader([&](const char* data, size_t n) {
      if (body.size() + n > options.max_body_bytes) {
        too_large = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    if (too_large || (req.has_header("Content-Length") &&
                      req.get_header_value<uint64_t>("Content-Length") > options.max_body_bytes)) {
      throw ApiError(413, StatusMessage(req, 413, options.max_body_bytes), "", "request_too_large");
    }
    if (!ok) throw ApiError(400, "could not read the request body", "", "invalid_body");
    return body;
  }

  void Register(const std::shared_ptr<CompletionSession>& session) {
    std::lock_guard<std::mutex> lock(sessions_mutex);
    sessions.insert(session);
    metrics.AddInFlight(1);
  }
  void Unregister(const std::shared_ptr<CompletionSession>& session) {
    std::lock_guard<std::mutex> lock(sessions_mutex);
    if (sessions.erase(session)) metrics.AddInFlight(-1);
  }

  void Generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res,
                const httplib::ContentReader& reader);
  void GenerateCompletions(const httplib::Request& req, httplib::Response& res,
                           const httplib::ContentReader& reader) {
    Generate(Endpoint::kCompletions, req, res, reader);
  }
  void GenerateChat(const httplib::Request& req, httplib::Response& res,
                    const httplib::ContentReader& reader) {
    Generate(Endpoint::kChatCompletions, req, res, reader);
  }
  void Tokenize(const httplib::Request& req, httplib::Response& res,
                const httplib::ContentReader& reader);
  void Detokenize(const httplib::Request& req, httplib::Response& res,
                  const httplib::ContentReader& reader);
};

void HttpServer::Impl::Generate(Endpoint endpoint, const httplib::Request& req,
                                httplib::Response& res, const httplib::ContentReader& reader) {
  const Clock::time_point arrival = Clock::now();
  std::shared_ptr<CompletionSession> session;
  try {
    const std::string body = ReadBody(req, reader);
    CheckAuth(req);
    const ServerContext& ctx = Ready();
    session = std::make_shared<CompletionSession>(
        ctx, ParseGenerationRequest(body, endpoint, ctx.limits), arrival);
    session->Start();
  } catch (const ApiError& e) {
    SendError(res, e);
    return;
  } catch (const Error& e) {
    SendError(res, ApiError(400, e.what()));
    return;
  }
  Register(session);
  if (!session->request().stream) {
    std::pair<int, std::string> response;
    try {
      while (!session->done()) session->Wait(kPollInterval);
      response = session->Response();
    } catch (...) {
      session->Cancel();
      Unregister(session);
      throw;  // The exception handler answers 500.
    }
    session->Cancel();  // A no-op unless the session ended early.
    Unregister(session);
    res.status = response.first;
    res.set_content(response.second, "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto last_write = std::make_shared<Clock::time_point>(Clock::now());
  // httplib calls the provider again and again until it calls sink.done() or returns false.
  // "text/event-stream" exactly: httplib never compresses that type, which would buffer chunks.
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, session, last_write](size_t, httplib::DataSink& sink) {
        // Nothing may escape into httplib's writer loop, which would end the process.
        try {
          session->Wait(kPollInterval);
          std::string text = session->TakeStream();
          // Out of the in-flight count before the client can read the end of the stream.
          if (session->stream_closed()) Unregister(session);
          const Clock::time_point now = Clock::now();
          if (text.empty() && now - *last_write >= kKeepAliveInterval) text = ": keep-alive\n\n";
          if (!text.empty()) {
            if (!sink.write(text.data(), text.size())) {
              session->Cancel();
              return false;
            }
            *last_write = now;
          }
          if (session->stream_closed()) {
            sink.done();
            return true;
          }
          if (!sink.is_writable()) {
            session->Cancel();
            return false;
          }
          return true;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "latent serve: stream failed: %s\n", e.what());
          session->Cancel();
          return false;
        }
      },
      // Always called once the response is over, written or not.
      [this, session](bool) {
        session->Cancel();
        Unregister(session);
      });
}

void HttpServer::Impl::Tokenize(const httplib::Request& req, httplib::Response& res,
                                const httplib::ContentReader& reader) {
  try {
    const std::string body = ReadBody(req, reader);
    CheckAuth(req);
    const ServerContext& ctx = Ready();
    const TokenizeRequest r = ParseTokenizeRequest(body, ctx.limits);
    if (!ctx.tokenizer) throw ApiError(400, "this model has no tokenizer", "prompt");
    std::string text = r.prompt;
    if (r.is_chat) {
      if (!ctx.chat_template) throw ApiError(400, "this model has no chat template", "messages");
      try {
        text = ctx.chat_template->Render(r.messages, r.tools, r.add_generation_prompt,
                                         r.chat_template_kwargs);
      } catch (const Error& e) {
        throw ApiError(400, StrCat("the chat template failed on these messages: ", e.what()),
                       "messages");
      }
    }
    const std::vector<int32_t> ids = ctx.tokenizer->Encode(text, r.add_special_tokens);
    OrderedJson out;
    out["count"] = ids.size();
    out["max_model_len"] = ctx.limits.context_tokens;
    out["tokens"] = ids;
    if (r.return_token_strs) {
      OrderedJson strs = OrderedJson::array();
      for (int32_t id : ids) strs.push_back(ctx.tokenizer->IdToToken(id).value_or(""));
      out["token_strs"] = std::move(strs);
    }
    SendJson(res, 200, out);
  } catch (const ApiError& e) {
    SendError(res, e);
  } catch (const Error& e) {
    SendError(res, ApiError(400, e.what()));
  }
}

void HttpServer::Impl::Detokenize(const httplib::Request& req, httplib::Response& res,
                                  const httplib::ContentReader& reader) {
  try {
    const std::string body = ReadBody(req, reader);
    CheckAuth(req);
    const ServerContext& ctx = Ready();
    const DetokenizeRequest r = ParseDetokenizeRequest(body, ctx.limits);
    if (!ctx.tokenizer) throw ApiError(400, "this model has no tokenizer", "tokens");
    SendJson(res, 200,
             {{"prompt", ctx.tokenizer->Decode(r.tokens, /*skip_special_tokens=*/false)}});
  } catch (const ApiError& e) {
    SendError(res, e);
  } catch (const Error& e) {
    SendError(res, ApiError(400, e.what()));
  }
}

void HttpServer::Impl::Routes() {
  using httplib::ContentReader;
  using httplib::Request;
  using httplib::Response;
  auto post = [this](const std::string& path, auto handler) {
    svr.Post(path, [this, handler](const Request& req, Response& res, const ContentReader& reader) {
      (this->*handler)(req, res, reader);
    });
    // Other methods on a POST route: 405, not 404.
    svr.Get(path, [](const Request&, Response& res) { res.status = 405; });
  };
  post("/v1/completions", &Impl::GenerateCompletions);
  post("/v1/chat/completions", &Impl::GenerateChat);
  post("/tokenize", &Impl::Tokenize);
  post("/detokenize", &Impl::Detokenize);

  svr.Get("/v1/models", [this](const Request& req, Response& res) {
    try {
      CheckAuth(req);
      const ServerContext& ctx = Ready();
      SendJson(res, 200, ModelsJson(model_name, started, ctx.limits.context_tokens));
    } catch (const ApiError& e) {
      SendError(res, e);
    }
  });
  svr.Get("/health", [this](const Request&, Response& res) {
    if (draining) {
      SendJson(res, 503, {{"status", "shutting down"}});
    } else if (!context.load()) {
      SendJson(res, 503, {{"status", "loading"}});
    } else {
      SendJson(res, 200, {{"status", "ok"}});
    }
  });
  svr.Get("/metrics", [this](const Request&, Response& res) {
    const ServerContext* ctx = context.load();
    std::string text;
    if (ctx) {
      const engine::EngineMetrics m = ctx->engine->Metrics();
      text = metrics.Render(model_name, &m);
    } else {
      text = metrics.Render(model_name, nullptr);
    }
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });

  // Before the body is read: a POST without Content-Length or chunked encoding would have
  // httplib read until the connection closes.
  svr.set_pre_routing_handler([this](const Request& req, Response& res) {
    if (req.method == "POST" && !req.has_header("Content-Length") &&
        !req.has_header("Transfer-Encoding")) {
      SendJson(
          res, 411,
          ErrorJson(411, "a POST needs a Content-Length (or chunked encoding)", "length_required"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Every response >= 400 passes here; fill in the ones no handler wrote (404, 405, httplib's 413).
  svr.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
        if (!res.body.empty() || res.content_provider_)
          return httplib::Server::HandlerResponse::Unhandled;
        SendJson(res, res.status,
                 ErrorJson(res.status, StatusMessage(req, res.status, options.max_body_bytes),
                           StatusCode(res.status)));
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = StrCat("internal error: ", e.what());
    } catch (...) {
    }
    SendJson(res, 500, ErrorJson(500, message, "internal_error"));
  });
  // Counted before the response is written, so a client that reads /metrics right after its
  // response sees it.
  svr.set_post_routing_handler(
      [this](const Request& req, Response& res) { metrics.CountResponse(req.path, res.status); });
  svr.set_logger([this](const Request& req, const Response& res) {
    if (options.log_requests) {
      std::fprintf(stderr, "latent serve: %s %s %d\n", req.method.c_str(), req.path.c_str(),
                   res.status);
    }
  });
}

HttpServer::HttpServer(HttpOptions options, std::string model_name, ServerMetrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(model_name), metrics)) {
  Impl& m = *impl_;
  const int threads = std::max(m.options.threads, 4);
  m.svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  m.svr.set_payload_max_length(m.options.max_body_bytes);
  m.svr.set_keep_alive_max_count(1000);
  m.svr.set_tcp_nodelay(true);
  m.svr.set_socket_options([&m](socket_t fd) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    m.listen_fd = fd;
  });
  m.Routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::Bind() {
  Impl& m = *impl_;
  int port = m.options.port;
  if (port == 0) {
    port = m.svr.bind_to_any_port(m.options.host);
  } else if (!m.svr.bind_to_port(m.options.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    Fail("cannot listen on ", m.options.host, ":", m.options.port,
         " (the port is in use, or the host is not an address of this machine)");
  }
  // httplib listens with a backlog of 5; a burst of clients connecting at once needs more.
  if (m.listen_fd >= 0) ::listen(m.listen_fd, m.options.listen_backlog);
  return port;
}

void HttpServer::Listen() { impl_->svr.listen_after_bind(); }

void HttpServer::SetReady(const ServerContext* context) { impl_->context.store(context); }

void HttpServer::StopAccepting() {
  Impl& m = *impl_;
  if (m.draining.exchange(true)) return;
  // Wakes the accept loop, which then closes the socket and waits for the connections' threads;
  // unlike httplib's stop(), streams in flight are not cut.
  if (m.listen_fd >= 0) ::shutdown(m.listen_fd, SHUT_RDWR);
}

int HttpServer::InFlight() const {
  std::lock_guard<std::mutex> lock(impl_->sessions_mutex);
  return static_cast<int>(impl_->sessions.size());
}

void HttpServer::AbortAll(const std::string& message) {
  std::lock_guard<std::mutex> lock(impl_->sessions_mutex);
  for (const auto& session : impl_->sessions) session->Abort(message);
}

void HttpServer::Stop() { impl_->svr.stop(); }

}  // namespace latent::server
