#include "server/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "server/chat_prompt.h"
#include "server/completion_session.h"
#include "server/constant_time.h"
#include "server/engine_metrics_reader.h"
#include "server/file_limit.h"
#include "server/http_parser.h"
#include "server/tool_request.h"
#include "server/worker_pool.h"

namespace latent::server {
namespace {

using Clock = std::chrono::steady_clock;

// How often the loop looks at every connection's timers (and writes SSE keep-alive comments).
constexpr auto kSweepInterval = std::chrono::milliseconds(100);
// While a stream has nothing to send, a comment line this often keeps proxies from timing it out
// (SSE clients ignore lines starting with ':').
constexpr auto kKeepAliveInterval = std::chrono::seconds(2);
// After an error response that closes the connection, the rest of what the client sends is read
// and dropped for this long, so that closing does not reset the connection before the client
// has read the response.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kReadChunk = 64 << 10;
// Reads per wake-up on one connection, so one fast sender cannot hold the loop.
constexpr size_t kMaxReadPerEvent = 1 << 20;
constexpr int kRetryAfterSeconds = 1;
// While accept() keeps failing for want of descriptors (or memory), one line says so at most this
// often: the loop retries every sweep, and a server at its limit runs out again and again.
constexpr auto kShortageLogInterval = std::chrono::seconds(60);

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The response head and body of a non-streaming response.
struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

Reply JsonReply(int status, const OrderedJson& body) {
  Reply r;
  r.status = status;
  r.body = Dump(body);
  return r;
}

Reply ErrorReply(const ApiError& error) {
  Reply r = JsonReply(error.status(), ErrorJson(error));
  if (error.status() == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  if (error.status() == 503) r.headers.emplace_back("Retry-After", std::to_string(kRetryAfterSeconds));
  return r;
}

Reply ErrorReply(int status, const std::string& message, const std::string& code) {
  Reply r = JsonReply(status, ErrorJson(status, message, code));
  if (status == 503) r.headers.emplace_back("Retry-After", std::to_string(kRetryAfterSeconds));
  return r;
}

// GET /v1/models/{id}: the model's object; the id is percent-decoded, and may hold '/'
// ("deepseek-ai/DeepSeek-V3", sent as is or as %2F).
constexpr std::string_view kModelPrefix = "/v1/models/";

bool IsModelPath(std::string_view path) {
  return path.size() > kModelPrefix.size() && path.substr(0, kModelPrefix.size()) == kModelPrefix;
}

// The methods a route answers, as a 405's Allow header lists them; null where no route is. Every
// GET route answers HEAD too (RFC 9110 9.3.2: its headers without the body), as Starlette's do.
const char* RouteMethods(std::string_view path) {
  if (path == "/health" || path == "/metrics" || path == "/v1/models" || path == "/version" ||
      IsModelPath(path)) {
    return "GET, HEAD";
  }
  if (path == "/ping") return "GET, HEAD, POST";  // SageMaker's health check, as vLLM's
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/tokenize" ||
      path == "/detokenize") {
    return "POST";
  }
  return nullptr;
}

// Whether `method` is one of `methods` ("GET, HEAD"); methods are case-sensitive.
bool MethodIn(std::string_view method, std::string_view methods) {
  while (!methods.empty()) {
    const size_t comma = methods.find(", ");
    if (methods.substr(0, comma) == method) return true;
    methods = comma == std::string_view::npos ? std::string_view() : methods.substr(comma + 2);
  }
  return false;
}

}  // namespace

struct HttpServer::Impl {
  enum class State {
    kRead,     // Reading a request (or idle between requests).
    kWork,     // The request is with a worker thread.
    kSession,  // A generation session is attached; its response goes out as events come.
    kWrite,    // A whole response is queued; then the next request, or the close.
    kLinger,   // Write side shut; reading and dropping until the client closes or time is up.
  };

  // What the engine's callback needs to wake the loop for a connection; shared with the session's
  // notifier, which may outlive the connection.
  struct Link {
    Impl* impl;
    uint64_t conn_id;
    std::atomic<bool> queued{true};  // Counted in `waiting` until the first engine event.
  };

  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    State state = State::kRead;
    uint32_t events = 0;  // Registered epoll events.
    std::string in;     // received bytes; those before in_used are parsed
    size_t in_used = 0;
    std::string out;
    size_t out_sent = 0;
    HttpRequestParser parser;
    // ProcessInput is running for this connection: a response that goes out at once and finds a
    // pipelined request behind it (AfterFlush) leaves it to that call's loop (input_pending)
    // instead of recursing, which would grow the stack with every pipelined request.
    bool processing_input = false;
    bool input_pending = false;
    bool keep_alive = true;
    bool close_after_write = false;
    bool linger = false;  // Close after a lingering read (the request was refused unread).
    Clock::time_point idle_since, request_start, headers_at, linger_until, last_write_progress,
        last_stream_write;
    // The request being served.
    std::string method, path;
    std::shared_ptr<CompletionSession> session;
    std::shared_ptr<Link> link;
    bool streaming = false;
    // The stream's bytes go in chunks (HTTP/1.1); an HTTP/1.0 client knows no chunked encoding
    // (RFC 9112 section 6.1), so its stream is the raw bytes and the close ends it.
    bool chunked_stream = true;

    // Appends stream bytes, framed as one chunk where the stream is chunked.
    void AppendStream(std::string_view text) {
      if (chunked_stream) {
        char size[20];
        std::snprintf(size, sizeof(size), "%zx\r\n", text.size());
        out += size;
      }
      out += text;
      if (chunked_stream) out += "\r\n";
    }

    explicit Conn(const HttpParseLimits& limits) : parser(limits) {}
    bool NoInput() const { return in_used == in.size(); }
    void ClearInput() {
      in.clear();
      in_used = 0;
    }
  };

  HttpOptions options;
  std::string model_name;
  ServerMetrics& metrics;
  HttpParseLimits parse_limits;
  int64_t started = static_cast<int64_t>(std::time(nullptr));
  std::atomic<const ServerContext*> context{nullptr};
  std::atomic<bool> draining{false};
  std::atomic<bool> stopping{false};

  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;  // eventfd: the engine's callbacks and the workers wake the loop through it.
  bool listening = false;  // listen_fd is in the epoll set.
  SpareFile spare;  // Given up for a moment to answer 503 when descriptors run out.
  // accept() failed for want of descriptors or memory, and no accept has worked since.
  bool short_of_files = false;
  std::optional<Clock::time_point> shortage_logged;  // When the last line about it went out.
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  Clock::time_point last_sweep;

  // Handed to the loop by other threads.
  std::mutex inbox_mutex;
  std::vector<uint64_t> ready_conns;  // Sessions with new events.
  std::vector<std::function<void()>> closures;  // Workers' results.
  bool wake_pending = false;

  // Generation requests admitted (from the hand-off to a worker to the end of the response), and
  // those of them without a first engine event yet.
  std::atomic<int> admitted{0};
  std::atomic<int> waiting{0};
  mutable std::mutex sessions_mutex;
  std::set<std::shared_ptr<CompletionSession>> sessions;
  // Set by AbortAll: a session that registers later (its prompt was still being tokenized) is
  // aborted as it registers, so that none outlives the drain.
  std::optional<std::string> abort_message;

  EngineMetricsReader engine_metrics;
  std::unique_ptr<WorkerPool> workers;  // Last: its threads stop before the rest goes.

  Impl(HttpOptions o, std::string name, ServerMetrics& m)
      : options(std::move(o)), model_name(std::move(name)), metrics(m) {
    parse_limits.max_body_bytes = options.max_body_bytes;
    parse_limits.max_header_bytes = options.max_header_bytes;
    parse_limits.max_request_line_bytes = std::min<size_t>(options.max_header_bytes, 8 << 10);
    int threads = options.threads;
    if (threads <= 0) threads = std::max(2u, std::min(16u, std::thread::hardware_concurrency()));
    workers = std::make_unique<WorkerPool>(threads, static_cast<size_t>(options.max_pending));
  }
  ~Impl() {
    workers.reset();
    for (auto& [id, conn] : conns) {
      if (conn->session) conn->session->Cancel();
      ::close(conn->fd);
    }
    if (listen_fd >= 0) ::close(listen_fd);
    if (epoll_fd >= 0) ::close(epoll_fd);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  // -- cross-thread hand-offs --

  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof(one));
  }
  void RunOnLoop(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(inbox_mutex);
      closures.push_back(std::move(fn));
      if (wake_pending) return;
      wake_pending = true;
    }
    Wake();
  }
  // The engine's thread (or Abort's): a session of `link` has news.
  void NotifySession(Link& link) {
    if (link.queued.exchange(false)) waiting.fetch_sub(1);
    {
      std::lock_guard<std::mutex> lock(inbox_mutex);
      ready_conns.push_back(link.conn_id);
      if (wake_pending) return;
      wake_pending = true;
    }
    Wake();
  }

  // -- request checks --

  // Throws ApiError 401 unless the request carries the API key (when one is set).
  void CheckAuth(const HttpRequest& req) const {
    if (options.api_key.empty()) return;
    const std::string* header = req.Header("authorization");
    const std::string prefix = "Bearer ";
    if (!header || header->rfind(prefix, 0) != 0) {
      throw ApiError(401, "missing API key: send 'Authorization: Bearer <key>'", "",
                     "invalid_api_key");
    }
    if (!ConstantTimeEqual(std::string_view(*header).substr(prefix.size()), options.api_key)) {
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

  // The CORS header lines of a response to `req` (a preflight's come with its reply).
  std::string CorsHead(const HttpRequest& req) const {
    std::string lines;
    if (IsCorsPreflight(req)) return lines;
    for (const auto& [name, value] : CorsResponseHeaders(options.cors, req)) {
      lines += StrCat(name, ": ", value, "\r\n");
    }
    return lines;
  }

  std::string TooLargeMessage() const {
    return StrCat("the request body is larger than the limit of ", options.max_body_bytes,
                  " bytes");
  }

  // -- the loop --

  void Loop();
  void Accept();
  void Refuse(int fd, const std::string& message);
  void NoteShortage(int error);
  void PauseAccepting();
  void SetEvents(Conn& c, uint32_t events);
  void WantEvents(Conn& c);
  void Close(Conn& c);
  void CloseId(uint64_t id) {
    auto it = conns.find(id);
    if (it != conns.end()) Close(*it->second);
  }
  void OnEvent(Conn& c, uint32_t events);
  void ReadInput(Conn& c);
  void ProcessInput(Conn& c);
  void ParseInput(Conn& c);
  void Flush(Conn& c);
  void AfterFlush(Conn& c);
  void Sweep(Clock::time_point now);
  void BeginDrain();
  void DrainInbox();

  // -- requests --

  void Dispatch(Conn& c);
  void Respond(Conn& c, const Reply& reply, bool close = false);
  void RespondError(Conn& c, int status, const std::string& message, const std::string& code,
                    bool close) {
    Respond(c, ErrorReply(status, message, code), close);
  }
  void StartGeneration(Conn& c, Endpoint endpoint, HttpRequest& req);
  void OnGenerationStarted(uint64_t id, std::shared_ptr<CompletionSession> session,
                           std::shared_ptr<Link> link, std::optional<Reply> error);
  void RunJob(Conn& c, std::function<Reply()> job);
  void Pump(Conn& c);
  void EndSession(Conn& c);
  void Register(const std::shared_ptr<CompletionSession>& session) {
    std::lock_guard<std::mutex> lock(sessions_mutex);
    sessions.insert(session);
    metrics.AddInFlight(1);
    if (abort_message) session->Abort(*abort_message);
  }
  void Unregister(const std::shared_ptr<CompletionSession>& session) {
    std::lock_guard<std::mutex> lock(sessions_mutex);
    if (sessions.erase(session)) metrics.AddInFlight(-1);
  }
  Reply Tokenize(const std::string& body) const;
  Reply Detokenize(const std::string& body) const;
  Reply Metrics();
};

// ---------------------------------------------------------------------------------------------
// The event loop.

void HttpServer::Impl::SetEvents(Conn& c, uint32_t events) {
  if (c.events == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = c.id;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
  c.events = events;
}

// What the connection's state needs to hear about. A hang-up is always asked for: a client that
// goes away while its request runs is noticed at once, not at the next write.
void HttpServer::Impl::WantEvents(Conn& c) {
  uint32_t events = EPOLLRDHUP;
  if (c.state == State::kRead || c.state == State::kLinger) events |= EPOLLIN;
  if (c.out_sent < c.out.size()) events |= EPOLLOUT;
  SetEvents(c, events);
}

void HttpServer::Impl::Close(Conn& c) {
  if (c.session) EndSession(c);
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  conns.erase(c.id);  // Destroys c.
}

// The session's request is over (answered, or its client gone): cancel what still runs in the
// engine (a no-op once it finished) and stop counting it.
void HttpServer::Impl::EndSession(Conn& c) {
  c.session->Cancel();
  Unregister(c.session);
  if (c.link && c.link->queued.exchange(false)) waiting.fetch_sub(1);
  admitted.fetch_sub(1);
  c.session.reset();
  c.link.reset();
}

void HttpServer::Impl::Accept() {
  for (int i = 0; i < 256; ++i) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      if (error == EMFILE || error == ENFILE) {
        NoteShortage(error);
        // The spare's slot takes the connection off the queue, to be answered and closed,
        // rather than left waiting there unanswered.
        if (!spare.held()) return PauseAccepting();
        spare.Release();
        const int refused = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        const int refused_error = errno;
        if (refused >= 0) {
          Refuse(refused, "too many connections (the server is out of file descriptors)");
        }
        spare.Take();
        if (refused >= 0) continue;
        if (refused_error == EMFILE || refused_error == ENFILE) return PauseAccepting();
        if (refused_error == EAGAIN || refused_error == EWOULDBLOCK) return;
        continue;  // That connection failed (aborted by its client, say).
      }
      if (error == ENOBUFS || error == ENOMEM) {
        NoteShortage(error);
        return PauseAccepting();
      }
      return;  // EAGAIN: none left; other errors concern that one connection.
    }
    short_of_files = false;
    if (!spare.held()) spare.Take();
    const int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    if (static_cast<int>(conns.size()) >= options.max_connections) {
      Refuse(fd, StrCat("too many connections (the limit is ", options.max_connections, ")"));
      continue;
    }
    auto conn = std::make_unique<Conn>(parse_limits);
    conn->id = next_id++;
    conn->fd = fd;
    conn->idle_since = conn->request_start = Clock::now();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = conn->id;
    if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    conn->events = ev.events;
    conns.emplace(conn->id, std::move(conn));
  }
}

// Answers a new connection 503 and closes it: best effort, one write of a short answer.
void HttpServer::Impl::Refuse(int fd, const std::string& message) {
  const Reply r = ErrorReply(503, message, "too_many_connections");
  const std::string text =
      StrCat("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n",
             "Retry-After: ", kRetryAfterSeconds, "\r\nConnection: close\r\nContent-Length: ",
             r.body.size(), "\r\n\r\n", r.body);
  [[maybe_unused]] const ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
  metrics.CountResponse("", 503);
  ::close(fd);
}

// accept() failed with `error` for want of descriptors or memory: one line when that starts,
// not one per retry, and not more than one a kShortageLogInterval.
void HttpServer::Impl::NoteShortage(int error) {
  if (short_of_files) return;
  short_of_files = true;
  const Clock::time_point now = Clock::now();
  if (shortage_logged && now - *shortage_logged < kShortageLogInterval) return;
  shortage_logged = now;
  const bool files = error == EMFILE || error == ENFILE;
  std::fprintf(stderr,
               "latent serve: cannot accept a connection: %s: %s; said once a minute at most\n",
               std::strerror(error),
               files ? "new connections get 503 until some close (raise the open-file limit, or "
                       "lower --max-connections)"
                     : "accepting paused, retried every 100 ms");
}

// Stops watching the listening socket until the next sweep, instead of spinning on it.
void HttpServer::Impl::PauseAccepting() {
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
  listening = false;
}

void HttpServer::Impl::Loop() {
  std::vector<epoll_event> events(1024);
  last_sweep = Clock::now();
  for (;;) {
    if (stopping) return;
    if (draining && listen_fd >= 0) BeginDrain();
    if (draining && conns.empty()) return;
    const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(kSweepInterval.count()));
    if (n < 0 && errno != EINTR) Fail("epoll_wait failed: ", std::strerror(errno));
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[i].data.u64;
      if (key == 0) {
        Accept();
      } else if (key == ~uint64_t{0}) {
        uint64_t count;
        [[maybe_unused]] const ssize_t r = ::read(wake_fd, &count, sizeof(count));
      } else if (auto it = conns.find(key); it != conns.end()) {
        OnEvent(*it->second, events[i].events);
      }
    }
    DrainInbox();
    const Clock::time_point now = Clock::now();
    if (now - last_sweep >= kSweepInterval) {
      last_sweep = now;
      Sweep(now);
    }
  }
}

void HttpServer::Impl::DrainInbox() {
  std::vector<uint64_t> ready;
  std::vector<std::function<void()>> fns;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex);
    ready.swap(ready_conns);
    fns.swap(closures);
    wake_pending = false;
  }
  for (auto& fn : fns) fn();
  std::sort(ready.begin(), ready.end());
  ready.erase(std::unique(ready.begin(), ready.end()), ready.end());
  for (uint64_t id : ready) {
    auto it = conns.find(id);
    if (it != conns.end() && it->second->state == State::kSession) Pump(*it->second);
  }
}

// Shutdown: no new connections (closing the socket refuses them), idle ones closed now; the
// others finish their request and close.
void HttpServer::Impl::BeginDrain() {
  if (listening) ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
  ::close(listen_fd);
  listen_fd = -1;
  listening = false;
  std::vector<uint64_t> idle;
  for (auto& [id, conn] : conns) {
    if (conn->state == State::kRead && !conn->parser.started() && conn->NoInput()) {
      idle.push_back(id);
    }
  }
  for (uint64_t id : idle) CloseId(id);
}

void HttpServer::Impl::OnEvent(Conn& c, uint32_t events) {
  const uint64_t id = c.id;
  if (events & EPOLLERR) {
    Close(c);
    return;
  }
  if (events & EPOLLOUT) {
    Flush(c);
    if (!conns.count(id)) return;
  }
  if (c.state == State::kRead || c.state == State::kLinger) {
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) ReadInput(c);
    return;
  }
  // The request is being served and the client hung up (or half-closed): nobody will read the
  // answer, so stop generating it.
  if (events & (EPOLLRDHUP | EPOLLHUP)) Close(c);
}

void HttpServer::Impl::ReadInput(Conn& c) {
  const uint64_t id = c.id;
  size_t total = 0;
  char buf[kReadChunk];
  bool eof = false;
  // Drop the parsed front once it is half the buffer: amortized, each byte moves once.
  if (c.in_used > 0 && c.in_used >= c.in.size() / 2) {
    c.in.erase(0, c.in_used);
    c.in_used = 0;
  }
  while (total < kMaxReadPerEvent) {
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      total += static_cast<size_t>(n);
      if (c.state == State::kLinger) continue;  // Dropped.
      if (c.NoInput() && !c.parser.started()) c.request_start = Clock::now();
      c.in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      eof = true;
    } else if (errno == EINTR) {
      continue;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      eof = true;  // Reset.
    }
    break;
  }
  if (c.state == State::kLinger) {
    if (eof) Close(c);
    return;
  }
  if (total > 0) ProcessInput(c);
  // A client that closed its side gets no answer to a partial request; one whose request is
  // being answered is closed by OnEvent's hang-up check.
  if (eof && conns.count(id) && c.state == State::kRead) Close(c);
}

void HttpServer::Impl::ProcessInput(Conn& c) {
  if (c.processing_input) {
    c.input_pending = true;  // The running call's loop takes it.
    return;
  }
  const uint64_t id = c.id;
  c.processing_input = true;
  do {
    c.input_pending = false;
    ParseInput(c);
    if (!conns.count(id)) return;  // Closed: c is gone.
  } while (c.input_pending);
  c.processing_input = false;
}

void HttpServer::Impl::ParseInput(Conn& c) {
  for (;;) {
    size_t consumed = 0;
    const auto result = c.parser.Parse(std::string_view(c.in).substr(c.in_used), consumed);
    c.in_used += consumed;
    if (c.NoInput()) c.ClearInput();
    switch (result) {
      case HttpRequestParser::Result::kNeedMore:
        WantEvents(c);
        return;
      case HttpRequestParser::Result::kError: {
        const int status = c.parser.error_status();
        c.method = c.parser.request().method;
        c.path = c.parser.request().path;
        RespondError(c, status, status == 413 ? TooLargeMessage() : c.parser.error_message(),
                     status == 413 ? "request_too_large" : "", /*close=*/true);
        return;
      }
      case HttpRequestParser::Result::kHeaders: {
        const HttpRequest& req = c.parser.request();
        c.headers_at = Clock::now();
        c.method = req.method;
        c.path = req.path;
        // Without a length, the body would run to the end of the connection.
        if (req.method == "POST" && !req.has_content_length && !req.chunked) {
          RespondError(c, 411, "a POST needs a Content-Length (or chunked encoding)",
                       "length_required", /*close=*/true);
          return;
        }
        if (req.ExpectsContinue() && (req.chunked || req.content_length > 0)) {
          const uint64_t id = c.id;  // Flush may close c (a failed send)
          c.out += "HTTP/1.1 100 Continue\r\n\r\n";
          Flush(c);
          if (!conns.count(id)) return;
        }
        continue;
      }
      case HttpRequestParser::Result::kComplete:
        Dispatch(c);
        return;
    }
  }
}

void HttpServer::Impl::Flush(Conn& c) {
  while (c.out_sent < c.out.size()) {
    const ssize_t n =
        ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_sent += static_cast<size_t>(n);
      c.last_write_progress = Clock::now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    Close(c);  // The client is gone.
    return;
  }
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
  } else if (c.out_sent > (1 << 20)) {
    c.out.erase(0, c.out_sent);
    c.out_sent = 0;
  }
  if (c.out.empty() && c.state == State::kWrite) {
    AfterFlush(c);
    return;
  }
  WantEvents(c);
}

// A whole response went out: the next request on the connection, or the close.
void HttpServer::Impl::AfterFlush(Conn& c) {
  if ((c.close_after_write || draining) && !c.linger) {
    Close(c);
    return;
  }
  if (c.close_after_write) {
    // Lingering close: shut the write side, then drop what the client still sends until it
    // closes, so that the response is not lost to a reset.
    ::shutdown(c.fd, SHUT_WR);
    c.state = State::kLinger;
    c.linger_until = Clock::now() + kLingerTime;
    c.ClearInput();
    WantEvents(c);
    return;
  }
  c.state = State::kRead;
  c.parser.Reset();
  c.idle_since = c.request_start = Clock::now();
  c.method.clear();
  c.path.clear();
  if (!c.NoInput()) {
    ProcessInput(c);  // A pipelined request.
  } else {
    WantEvents(c);
  }
}

void HttpServer::Impl::Sweep(Clock::time_point now) {
  if (!listening && !draining && listen_fd >= 0) {
    // Accepting paused when descriptors ran out; try again (quietly: NoteShortage logs once).
    spare.Take();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev) == 0) listening = true;
  }
  std::vector<std::pair<uint64_t, int>> expired;  // id, 0: close, else: answer that status.
  std::vector<uint64_t> keep_alive;  // Streams to send a comment line.
  for (auto& [id, conn] : conns) {
    Conn& c = *conn;
    switch (c.state) {
      case State::kRead:
        if (!c.parser.started() && c.NoInput()) {
          if (now - c.idle_since > Seconds(options.keep_alive_timeout_s)) {
            expired.emplace_back(id, 0);
          }
        } else if (c.parser.in_body()) {
          if (now - c.headers_at > Seconds(options.body_timeout_s)) expired.emplace_back(id, 408);
        } else if (now - c.request_start > Seconds(options.header_timeout_s)) {
          expired.emplace_back(id, 408);
        }
        break;
      case State::kLinger:
        if (now > c.linger_until) expired.emplace_back(id, 0);
        break;
      case State::kSession:
        if (c.streaming && c.out.empty() && now - c.last_stream_write >= kKeepAliveInterval) {
          keep_alive.push_back(id);
          break;
        }
        [[fallthrough]];
      case State::kWrite:
        if (!c.out.empty() && now - c.last_write_progress > Seconds(options.write_timeout_s)) {
          expired.emplace_back(id, 0);  // The client stopped reading.
        }
        break;
      case State::kWork:
        break;
    }
  }
  for (uint64_t id : keep_alive) {
    auto it = conns.find(id);
    if (it == conns.end()) continue;
    Conn& c = *it->second;
    c.AppendStream(": keep-alive\n\n");  // An SSE comment.
    c.last_stream_write = c.last_write_progress = now;
    Flush(c);
  }
  for (auto [id, status] : expired) {
    auto it = conns.find(id);
    if (it == conns.end()) continue;
    if (status == 0) {
      Close(*it->second);
    } else {
      RespondError(*it->second, status, "the request was not received in time (timeout)",
                   "request_timeout", /*close=*/true);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Requests.

void HttpServer::Impl::Respond(Conn& c, const Reply& reply, bool close) {
  metrics.CountResponse(c.path, reply.status);
  if (options.log_requests) {
    std::fprintf(stderr, "latent serve: %s %s %d\n", c.method.c_str(), c.path.c_str(),
                 reply.status);
  }
  const HttpRequest& req = c.parser.request();
  c.close_after_write = close || draining || !req.KeepAlive();
  c.linger = close;
  std::string head = StrCat("HTTP/1.1 ", reply.status, " ", StatusReason(reply.status),
                            "\r\nContent-Type: ", reply.content_type,
                            "\r\nContent-Length: ", reply.body.size(), "\r\n");
  for (const auto& [name, value] : reply.headers) head += StrCat(name, ": ", value, "\r\n");
  head += CorsHead(req);
  if (c.close_after_write) {
    head += "Connection: close\r\n";
  } else if (req.minor_version == 0) {
    head += "Connection: keep-alive\r\n";
  }
  head += "\r\n";
  c.out += head;
  // A HEAD's response is a GET's without the body: the same status and headers, Content-Length
  // included (RFC 9110 9.3.2). So are its errors.
  if (req.method != "HEAD") c.out += reply.body;
  c.state = State::kWrite;
  c.last_write_progress = Clock::now();
  Flush(c);
}

void HttpServer::Impl::Dispatch(Conn& c) {
  HttpRequest& req = c.parser.request();
  const std::string& path = req.path;
  try {
    // Before routing and the API key: a browser asks on any path, and without credentials.
    if (IsCorsPreflight(req)) {
      CorsPreflightReply preflight = CorsPreflight(options.cors, req);
      Reply r;
      r.status = preflight.status;
      r.body = std::move(preflight.body);
      r.content_type = "text/plain; charset=utf-8";
      r.headers = std::move(preflight.headers);
      Respond(c, r);
      return;
    }
    const char* methods = RouteMethods(path);
    if (!methods) {
      throw ApiError(404, StrCat("no route for ", req.method, " ", path), "", "not_found");
    }
    if (!MethodIn(req.method, methods)) {
      Reply r = ErrorReply(405, StrCat("method ", req.method, " is not allowed on ", path),
                           "method_not_allowed");
      r.headers.emplace_back("Allow", methods);  // RFC 9110 15.5.6
      Respond(c, r);
      return;
    }
    // From here a HEAD is served as a GET; Respond leaves its body out.
    if (path == "/health" || path == "/ping") {
      if (draining) {
        Respond(c, JsonReply(503, {{"status", "shutting down"}}));
      } else if (!context.load()) {
        Respond(c, JsonReply(503, {{"status", "loading"}}));
      } else {
        Respond(c, JsonReply(200, {{"status", "ok"}}));
      }
      return;
    }
    if (path == "/metrics") {
      RunJob(c, [this] { return Metrics(); });
      return;
    }
    if (path == "/version") {
      Respond(c, JsonReply(200, {{"version", LATENT_VERSION}}));
      return;
    }
    if (path == "/v1/models" || IsModelPath(path)) {
      CheckAuth(req);
      const ServerContext& ctx = Ready();
      OrderedJson models = ModelsJson(model_name, started, ctx.limits.context_tokens);
      if (path == "/v1/models") {
        Respond(c, JsonReply(200, models));
        return;
      }
      const std::string_view asked = std::string_view(path).substr(kModelPrefix.size());
      const std::optional<std::string> id = PercentDecode(asked);
      if (id != model_name) {
        throw ApiError(404,
                       StrCat("The model '", id ? *id : std::string(asked),
                              "' does not exist; this server serves '", model_name, "'"),
                       "model", "model_not_found");
      }
      Respond(c, JsonReply(200, models["data"][0]));
      return;
    }
    if (path == "/v1/completions" || path == "/v1/chat/completions") {
      StartGeneration(
          c, path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChatCompletions, req);
      return;
    }
    // /tokenize, /detokenize
    CheckAuth(req);
    Ready();
    const bool tokenize = path == "/tokenize";
    RunJob(c, [this, tokenize, body = std::move(req.body)] {
      return tokenize ? Tokenize(body) : Detokenize(body);
    });
  } catch (const ApiError& e) {
    Respond(c, ErrorReply(e));
  }
}

// Runs `job` on a worker; its reply goes out on the loop. 503 when the workers' queue is full.
void HttpServer::Impl::RunJob(Conn& c, std::function<Reply()> job) {
  const uint64_t id = c.id;
  c.state = State::kWork;
  WantEvents(c);
  const bool queued = workers->TryPost([this, id, job = std::move(job)] {
    Reply reply;
    try {
      reply = job();
    } catch (const ApiError& e) {
      reply = ErrorReply(e);
    } catch (const Error& e) {  // bad input: 400; a failed check (InternalError): 500
      reply = ErrorReply(RequestError(e));
    } catch (const std::exception& e) {
      reply = ErrorReply(500, StrCat("internal error: ", e.what()), "internal_error");
    }
    RunOnLoop([this, id, reply = std::move(reply)] {
      auto it = conns.find(id);
      if (it != conns.end() && it->second->state == State::kWork) Respond(*it->second, reply);
    });
  });
  if (!queued) {
    Respond(c, ErrorReply(503, "the server is busy: too many requests are waiting (retry later)",
                          "server_busy"));
  }
}

void HttpServer::Impl::StartGeneration(Conn& c, Endpoint endpoint, HttpRequest& req) {
  const Clock::time_point arrival = c.request_start;
  CheckAuth(req);
  const ServerContext& ctx = Ready();
  // Back-pressure: a queue longer than --max-waiting would only make everyone wait longer.
  if (waiting.load() >= options.max_waiting) {
    throw ApiError(503,
                   StrCat("the server is overloaded: ", options.max_waiting,
                          " requests are already waiting for the engine (--max-waiting); retry "
                          "later"),
                   "", "server_overloaded");
  }
  auto link = std::make_shared<Link>();
  link->impl = this;
  link->conn_id = c.id;
  waiting.fetch_add(1);
  admitted.fetch_add(1);
  c.state = State::kWork;
  WantEvents(c);
  const uint64_t id = c.id;
  const bool queued = workers->TryPost([this, id, endpoint, &ctx, link, arrival,
                                        body = std::move(req.body)] {
    std::shared_ptr<CompletionSession> session;
    std::optional<Reply> error;
    try {
      session = std::make_shared<CompletionSession>(
          ctx, ParseGenerationRequest(body, endpoint, ctx.limits), arrival);
      session->SetNotify([link] { link->impl->NotifySession(*link); });
      session->Start();
    } catch (const ApiError& e) {
      error = ErrorReply(e);
    } catch (const Error& e) {  // bad input: 400; a failed check (InternalError): 500
      error = ErrorReply(RequestError(e));
    } catch (const std::exception& e) {
      error = ErrorReply(500, StrCat("internal error: ", e.what()), "internal_error");
    }
    if (error) session.reset();
    RunOnLoop([this, id, session, link, error] { OnGenerationStarted(id, session, link, error); });
  });
  if (!queued) {
    waiting.fetch_sub(1);
    admitted.fetch_sub(1);
    Respond(c, ErrorReply(503, "the server is busy: too many requests are waiting (retry later)",
                          "server_busy"));
  }
}

void HttpServer::Impl::OnGenerationStarted(uint64_t id, std::shared_ptr<CompletionSession> session,
                                           std::shared_ptr<Link> link, std::optional<Reply> error) {
  auto it = conns.find(id);
  Conn* c = it == conns.end() ? nullptr : it->second.get();
  if (error || !c || c->state != State::kWork) {
    if (session) session->Cancel();  // The client left while its prompt was tokenized.
    if (link->queued.exchange(false)) waiting.fetch_sub(1);
    admitted.fetch_sub(1);
    if (c && error) Respond(*c, *error);
    return;
  }
  Register(session);
  c->session = session;
  c->link = link;
  c->state = State::kSession;
  c->streaming = session->request().stream;
  if (c->streaming) {
    metrics.CountResponse(c->path, 200);
    if (options.log_requests) {
      std::fprintf(stderr, "latent serve: %s %s 200\n", c->method.c_str(), c->path.c_str());
    }
    c->chunked_stream = c->parser.request().minor_version >= 1;
    c->close_after_write = draining || !c->parser.request().KeepAlive() || !c->chunked_stream;
    // Close after a lingering read: the client may have sent more meanwhile, and closing with
    // unread bytes resets the connection, which can cut off the stream's last bytes.
    c->linger = c->close_after_write;
    c->out += StrCat(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        "X-Accel-Buffering: no\r\n", CorsHead(c->parser.request()),
        c->chunked_stream ? "Transfer-Encoding: chunked\r\n" : "",
        c->close_after_write ? "Connection: close\r\n" : "", "\r\n");
    c->last_stream_write = c->last_write_progress = Clock::now();
  }
  Pump(*c);  // Events may have come while the loop did not know the session yet.
}

// Applies the session's new engine events and writes what they produced.
void HttpServer::Impl::Pump(Conn& c) {
  const uint64_t id = c.id;
  std::shared_ptr<CompletionSession> session = c.session;
  try {
    session->Wait(std::chrono::milliseconds(0));
    if (c.streaming) {
      const std::string text = session->TakeStream();
      if (!text.empty()) {
        if (c.out.empty()) c.last_write_progress = Clock::now();
        c.AppendStream(text);
        c.last_stream_write = Clock::now();
      }
      if (session->stream_closed()) {
        // Out of the in-flight count before the client can read the end of the stream.
        EndSession(c);
        if (c.chunked_stream) c.out += "0\r\n\r\n";
        c.state = State::kWrite;
      }
      Flush(c);
      return;
    }
    if (!session->done()) return;
    const std::pair<int, std::string> response = session->Response();
    EndSession(c);
    Reply reply;
    reply.status = response.first;
    reply.body = response.second;
    if (reply.status == 503) reply.headers.emplace_back("Retry-After", std::to_string(kRetryAfterSeconds));
    Respond(c, reply);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "latent serve: request failed: %s\n", e.what());
    if (!conns.count(id)) return;
    if (c.streaming || c.state != State::kSession) {
      Close(c);  // Mid-stream: nothing better to do than to cut it.
    } else {
      EndSession(c);
      Respond(c, ErrorReply(500, StrCat("internal error: ", e.what()), "internal_error"));
    }
  }
}

// On a worker (the API key was checked on the loop).
Reply HttpServer::Impl::Tokenize(const std::string& body) const {
  const ServerContext& ctx = Ready();
  const TokenizeRequest r = ParseTokenizeRequest(body, ctx.limits);
  if (!ctx.tokenizer) throw ApiError(400, "this model has no tokenizer", "prompt");
  std::string text = r.prompt;
  if (r.is_chat) {
    if (!ctx.chat_template) throw ApiError(400, "this model has no chat template", "messages");
    text = RenderChatPrompt(*ctx.chat_template, r);
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
  return JsonReply(200, out);
}

Reply HttpServer::Impl::Detokenize(const std::string& body) const {
  const ServerContext& ctx = Ready();
  const DetokenizeRequest r = ParseDetokenizeRequest(body, ctx.limits);
  if (!ctx.tokenizer) throw ApiError(400, "this model has no tokenizer", "tokens");
  return JsonReply(200, {{"prompt", ctx.tokenizer->Decode(r.tokens, /*skip_special_tokens=*/false)}});
}

// On a worker: the engine's figures as last published at a step boundary (never waits for one).
Reply HttpServer::Impl::Metrics() {
  const ServerContext* ctx = context.load();
  Reply r;
  if (ctx) {
    const engine::EngineMetrics m = engine_metrics.Read(*ctx->engine);
    r.body = metrics.Render(model_name, &m);
  } else {
    r.body = metrics.Render(model_name, nullptr);
  }
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return r;
}

// ---------------------------------------------------------------------------------------------

HttpServer::HttpServer(HttpOptions options, std::string model_name, ServerMetrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(model_name), metrics)) {}

HttpServer::~HttpServer() = default;

int HttpServer::Bind() {
  Impl& m = *impl_;
  auto fail = [&m] {
    Fail("cannot listen on ", m.options.host, ":", m.options.port,
         " (the port is in use, or the host is not an address of this machine)");
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(m.options.port);
  if (::getaddrinfo(m.options.host.c_str(), port_text.c_str(), &hints, &found) != 0) fail();
  for (addrinfo* a = found; a && m.listen_fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            a->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, m.options.listen_backlog) == 0) {
      m.listen_fd = fd;
    } else {
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (m.listen_fd < 0) fail();
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.ss_family == AF_INET6
                             ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                             : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);

  m.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  m.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m.epoll_fd < 0 || m.wake_fd < 0) Fail("cannot create the event loop: ", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  ::epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, m.listen_fd, &ev);
  m.listening = true;
  ev.data.u64 = ~uint64_t{0};
  ::epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, m.wake_fd, &ev);
  if (!m.spare.Take()) Fail("cannot open /dev/null: ", std::strerror(errno));
  // Last, so that the descriptors above count as the server's own.
  m.options.max_connections = FitConnectionsToFileLimit(m.options.max_connections);
  return port;
}

void HttpServer::Listen() { impl_->Loop(); }

void HttpServer::SetReady(const ServerContext* context) { impl_->context.store(context); }

void HttpServer::StopAccepting() {
  Impl& m = *impl_;
  if (m.draining.exchange(true)) return;
  m.Wake();  // The loop closes the listening socket.
}

int HttpServer::InFlight() const { return impl_->admitted.load(); }

void HttpServer::AbortAll(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(impl_->sessions_mutex);
    impl_->abort_message = message;
    for (const auto& session : impl_->sessions) session->Abort(message);
  }
  // A request whose grammar is compiling has no session yet, and XGrammar cannot be interrupted:
  // it stops waiting (a 503) and the compile runs on unwaited for.
  const ServerContext* context = impl_->context.load();
  if (context != nullptr && context->structured != nullptr) context->structured->Abandon(message);
}

void HttpServer::Stop() {
  impl_->stopping = true;
  impl_->Wake();
}

}  // namespace latent::server
