// An incremental HTTP/1.1 request parser for the event-driven server (http_server.cc): bytes go
// in as they arrive on a non-blocking socket, a request comes out once whole. It reads the
// request line and headers (with size limits), then a body by Content-Length or chunked transfer
// encoding (with the body size limit), and refuses what it cannot frame with the HTTP status to
// answer (400, 411 is the server's call, 413, 414, 431, 501).
//
// The parser stops at the end of one request; bytes past it (a pipelined next request) stay in
// the caller's buffer for the next Reset().
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace latent::server {

struct HttpRequest {
  std::string method;
  std::string target;  // As sent: path and query.
  std::string path;    // The target up to '?'.
  int minor_version = 1;  // HTTP/1.<minor_version>.
  std::vector<std::pair<std::string, std::string>> headers;  // Names lower-cased, in order.
  std::string body;
  bool chunked = false;
  bool has_content_length = false;
  size_t content_length = 0;

  // The value of header `lower_name` (first occurrence), or null.
  const std::string* Header(std::string_view lower_name) const;
  // HTTP/1.1 keeps the connection unless "Connection: close"; 1.0 only with "keep-alive".
  bool KeepAlive() const;
  bool ExpectsContinue() const;
};

struct HttpParseLimits {
  size_t max_request_line_bytes = 8 << 10;
  size_t max_header_bytes = 64 << 10;  // Request line and headers together.
  size_t max_body_bytes = 8 << 20;
};

class HttpRequestParser {
 public:
  enum class Result {
    kNeedMore,  // Feed more bytes.
    kHeaders,   // Request line and headers are complete (returned once per request).
    kComplete,  // The whole request, body included, is in request().
    kError,     // Malformed or over a limit: answer error_status() and close the connection.
  };

  explicit HttpRequestParser(HttpParseLimits limits) : limits_(limits) {}

  // Consumes what it can from the front of `buffer` (erasing it) and says where the request
  // stands. Call again after kHeaders to go on with the body.
  Result Parse(std::string& buffer);
  // The same over `input`, erasing nothing: `consumed` is how much of its front was taken. A
  // server holding many pipelined requests in one buffer moves an offset instead of erasing the
  // front at every request (quadratic in the buffered bytes).
  Result Parse(std::string_view input, size_t& consumed);
  // Ready for the next request on the connection.
  void Reset();

  const HttpRequest& request() const { return request_; }
  HttpRequest& request() { return request_; }
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  // Some bytes of a request were received (for the header timeout).
  bool started() const { return phase_ != Phase::kStart; }
  // Past the headers and not done (for the body timeout): a chunked body's size lines, chunk
  // ends and trailers included.
  bool in_body() const {
    return phase_ == Phase::kBody || phase_ == Phase::kChunkSize || phase_ == Phase::kChunkData ||
           phase_ == Phase::kChunkDataEnd || phase_ == Phase::kTrailers;
  }

 private:
  enum class Phase { kStart, kHeaders, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailers,
                     kDone, kError };

  Result Fail(int status, std::string message);
  Result ParseRequestLine(std::string_view line);
  Result ParseHead(std::string_view head);
  Result ParseChunked(std::string_view& buffer, size_t& consumed);

  HttpParseLimits limits_;
  HttpRequest request_;
  Phase phase_ = Phase::kStart;
  bool request_line_checked_ = false;
  size_t chunk_left_ = 0;
  size_t trailer_bytes_ = 0;  // the trailer section's lines so far
  int error_status_ = 0;
  std::string error_message_;
};

// A path segment with its %XX escapes decoded ("deepseek-ai%2FDeepSeek-V3" ->
// "deepseek-ai/DeepSeek-V3"); '+' stays '+', as in a path. Null for a '%' without two hex digits.
std::optional<std::string> PercentDecode(std::string_view text);

// The reason phrase of a status code ("OK", "Not Found", ...).
const char* StatusReason(int status);

}  // namespace latent::server
