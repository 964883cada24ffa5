#include "server/http_parser.h"

#include <algorithm>
#include <cctype>

namespace latent::server {
namespace {

constexpr size_t kMaxChunkLineBytes = 1024;
constexpr size_t kMaxTrailerBytes = 8 << 10;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool IsTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// The line at `pos` without its "\n" or "\r\n"; `next` is set past it. False when incomplete.
bool TakeLine(std::string_view text, size_t pos, std::string_view& line, size_t& next) {
  const size_t nl = text.find('\n', pos);
  if (nl == std::string_view::npos) return false;
  line = text.substr(pos, nl - pos);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  next = nl + 1;
  return true;
}

// Moves n bytes from the front of `rest` (what is left of Parse's input) to `consumed`.
void Take(std::string_view& rest, size_t& consumed, size_t n) {
  rest.remove_prefix(n);
  consumed += n;
}

// Whether a comma-separated header value lists `token` (case-insensitive).
bool ListsToken(const std::string& value, std::string_view token) {
  const std::string lower = Lower(value);
  size_t start = 0;
  while (start <= lower.size()) {
    size_t end = lower.find(',', start);
    if (end == std::string::npos) end = lower.size();
    if (Trim(std::string_view(lower).substr(start, end - start)) == token) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

const std::string* HttpRequest::Header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return &value;
  }
  return nullptr;
}

bool HttpRequest::KeepAlive() const {
  const std::string* connection = Header("connection");
  if (minor_version == 0) return connection && ListsToken(*connection, "keep-alive");
  return !(connection && ListsToken(*connection, "close"));
}

bool HttpRequest::ExpectsContinue() const {
  const std::string* expect = Header("expect");
  return minor_version >= 1 && expect && Lower(*expect) == "100-continue";
}

std::optional<std::string> PercentDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int high = hex(text[i + 1]), low = hex(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

void HttpRequestParser::Reset() {
  request_ = HttpRequest();
  phase_ = Phase::kStart;
  request_line_checked_ = false;
  chunk_left_ = 0;
  trailer_bytes_ = 0;
  error_status_ = 0;
  error_message_.clear();
}

HttpRequestParser::Result HttpRequestParser::Fail(int status, std::string message) {
  phase_ = Phase::kError;
  error_status_ = status;
  error_message_ = std::move(message);
  return Result::kError;
}

HttpRequestParser::Result HttpRequestParser::Parse(std::string& buffer) {
  size_t consumed = 0;
  const Result result = Parse(std::string_view(buffer), consumed);
  buffer.erase(0, consumed);
  return result;
}

HttpRequestParser::Result HttpRequestParser::Parse(std::string_view input, size_t& consumed) {
  consumed = 0;
  std::string_view buffer = input;  // what is left of input
  const auto take = [&](size_t n) { Take(buffer, consumed, n); };
  if (phase_ == Phase::kError) return Result::kError;
  if (phase_ == Phase::kDone) return Result::kComplete;
  if (phase_ == Phase::kStart) {
    // Empty lines before a request line are allowed (RFC 9112 section 2.2).
    size_t skip = 0;
    while (skip < buffer.size() && (buffer[skip] == '\r' || buffer[skip] == '\n')) ++skip;
    take(skip);
    if (buffer.empty()) return Result::kNeedMore;
    phase_ = Phase::kHeaders;
  }
  if (phase_ == Phase::kHeaders) {
    const size_t first_nl = buffer.find('\n');
    // Garbage is refused as soon as it shows, not when a timeout or a size limit passes: the
    // method's characters as they come, the whole request line once it is there.
    const size_t method_end = std::min({buffer.find(' '), first_nl, buffer.size()});
    const std::string_view method = buffer.substr(0, method_end);
    if (!std::all_of(method.begin(), method.end(), IsTokenChar) || method.size() > 32) {
      return Fail(400, "malformed HTTP request");
    }
    if (first_nl == std::string::npos) {
      if (buffer.size() > limits_.max_request_line_bytes) {
        return Fail(414, "the request URI is too long");
      }
      return Result::kNeedMore;
    }
    if (first_nl > limits_.max_request_line_bytes) return Fail(414, "the request URI is too long");
    if (!request_line_checked_) {
      std::string_view line = buffer.substr(0, first_nl);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (ParseRequestLine(line) == Result::kError) return Result::kError;
      request_line_checked_ = true;
    }
    // The end of the headers: an empty line.
    size_t end = std::string::npos;
    for (size_t nl = first_nl; nl != std::string::npos; nl = buffer.find('\n', nl + 1)) {
      if (nl + 1 < buffer.size() && buffer[nl + 1] == '\n') {
        end = nl + 2;
        break;
      }
      if (nl + 2 < buffer.size() && buffer[nl + 1] == '\r' && buffer[nl + 2] == '\n') {
        end = nl + 3;
        break;
      }
      if (nl > limits_.max_header_bytes) break;
    }
    if (end == std::string::npos) {
      if (buffer.size() > limits_.max_header_bytes) {
        return Fail(431, "the request headers are too large");
      }
      return Result::kNeedMore;
    }
    if (end > limits_.max_header_bytes + 4) return Fail(431, "the request headers are too large");
    const Result head = ParseHead(buffer.substr(0, end));
    take(end);
    if (head == Result::kError) return head;
    if (request_.chunked) {
      phase_ = Phase::kChunkSize;
    } else if (request_.content_length > 0) {
      phase_ = Phase::kBody;
    } else {
      phase_ = Phase::kDone;
    }
    return Result::kHeaders;
  }
  if (phase_ == Phase::kBody) {
    const size_t want = request_.content_length - request_.body.size();
    const size_t count = std::min(want, buffer.size());
    request_.body.append(buffer.substr(0, count));
    take(count);
    if (request_.body.size() < request_.content_length) return Result::kNeedMore;
    phase_ = Phase::kDone;
    return Result::kComplete;
  }
  return ParseChunked(buffer, consumed);
}

// METHOD SP target SP HTTP/1.x
HttpRequestParser::Result HttpRequestParser::ParseRequestLine(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == std::string_view::npos || sp2 == sp1 + 1) {
    return Fail(400, "malformed HTTP request");
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!std::all_of(method.begin(), method.end(), IsTokenChar)) {
    return Fail(400, "malformed HTTP request");
  }
  if (version == "HTTP/1.1") {
    request_.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    request_.minor_version = 0;
  } else {
    return Fail(400, "malformed HTTP request");
  }
  if (std::any_of(target.begin(), target.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 127; })) {
    return Fail(400, "malformed HTTP request");
  }
  request_.method = std::string(method);
  request_.target = std::string(target);
  request_.path = request_.target.substr(0, request_.target.find('?'));
  return Result::kHeaders;
}

HttpRequestParser::Result HttpRequestParser::ParseHead(std::string_view head) {
  std::string_view line;
  size_t pos = 0, next = 0;
  TakeLine(head, pos, line, next);
  pos = next;
  if (ParseRequestLine(line) == Result::kError) return Result::kError;

  while (TakeLine(head, pos, line, next)) {
    pos = next;
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos) return Fail(400, "malformed HTTP request");
    const std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), IsTokenChar)) {
      return Fail(400, "malformed HTTP request");  // Also obsolete line folding.
    }
    const std::string_view value = Trim(line.substr(colon + 1));
    // RFC 9110 section 5.5: a field value holding NUL or CR (or LF: already a line end) must be
    // refused; passed on, a NUL would cut the value short wherever it is read as a C string.
    if (value.find_first_of(std::string_view("\0\r", 2)) != std::string_view::npos) {
      return Fail(400, "malformed HTTP request (NUL or CR in a header value)");
    }
    request_.headers.emplace_back(Lower(name), std::string(value));
  }

  for (const auto& [name, value] : request_.headers) {
    if (name == "content-length") {
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return Fail(400, "malformed HTTP request (Content-Length)");
      }
      const size_t length = std::stoull(value);
      if (request_.has_content_length && length != request_.content_length) {
        return Fail(400, "malformed HTTP request (conflicting Content-Length)");
      }
      request_.has_content_length = true;
      request_.content_length = length;
    } else if (name == "transfer-encoding") {
      if (Lower(Trim(value)) != "chunked" || request_.chunked) {
        return Fail(501, "only chunked transfer encoding is supported");
      }
      request_.chunked = true;
    }
  }
  if (request_.chunked && request_.has_content_length) {
    return Fail(400, "malformed HTTP request (both Content-Length and Transfer-Encoding)");
  }
  if (request_.content_length > limits_.max_body_bytes) {
    return Fail(413, "");  // The server words it (it knows the limit's flag).
  }
  return Result::kHeaders;
}

// buffer: what is left of Parse's input; consumed counts what this takes from it.
HttpRequestParser::Result HttpRequestParser::ParseChunked(std::string_view& buffer,
                                                          size_t& consumed) {
  const auto take = [&](size_t n) { Take(buffer, consumed, n); };
  for (;;) {
    std::string_view line;
    size_t next = 0;
    switch (phase_) {
      case Phase::kChunkSize: {
        // A chunk-size line (with any extensions) is bounded whether or not it is complete.
        const bool whole = TakeLine(buffer, 0, line, next);
        if ((whole ? next : buffer.size()) > kMaxChunkLineBytes) {
          return Fail(400, "malformed chunked body (chunk-size line too long)");
        }
        if (!whole) return Result::kNeedMore;
        const std::string_view digits = Trim(line.substr(0, line.find(';')));
        if (digits.empty() || digits.size() > 15 ||
            !std::all_of(digits.begin(), digits.end(),
                         [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
          return Fail(400, "malformed chunked body");
        }
        const size_t size = std::stoull(std::string(digits), nullptr, 16);
        take(next);
        if (size == 0) {
          phase_ = Phase::kTrailers;
          break;
        }
        if (request_.body.size() + size > limits_.max_body_bytes) return Fail(413, "");
        chunk_left_ = size;
        phase_ = Phase::kChunkData;
        break;
      }
      case Phase::kChunkData: {
        const size_t count = std::min(chunk_left_, buffer.size());
        request_.body.append(buffer.substr(0, count));
        take(count);
        chunk_left_ -= count;
        if (chunk_left_ > 0) return Result::kNeedMore;
        phase_ = Phase::kChunkDataEnd;
        break;
      }
      case Phase::kChunkDataEnd: {
        if (!TakeLine(buffer, 0, line, next)) {
          if (buffer.size() > 2) return Fail(400, "malformed chunked body");
          return Result::kNeedMore;
        }
        if (!line.empty()) return Fail(400, "malformed chunked body");
        take(next);
        phase_ = Phase::kChunkSize;
        break;
      }
      case Phase::kTrailers: {
        // The trailer section as a whole is bounded, complete lines included.
        const bool whole = TakeLine(buffer, 0, line, next);
        if (trailer_bytes_ + (whole ? next : buffer.size()) > kMaxTrailerBytes) {
          return Fail(431, "the request headers are too large (trailer section)");
        }
        if (!whole) return Result::kNeedMore;
        trailer_bytes_ += next;
        take(next);
        if (line.empty()) {
          phase_ = Phase::kDone;
          return Result::kComplete;
        }
        break;  // Trailer fields are ignored.
      }
      default:
        return Fail(400, "malformed HTTP request");
    }
  }
}

const char* StatusReason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

}  // namespace latent::server
