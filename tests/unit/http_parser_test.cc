// The event-driven server's HTTP/1.1 request parser: framing (Content-Length, chunked, pipelined
// requests, bytes arriving one at a time), the limits it answers with 413/414/431, malformed
// requests (400/501), and the constant-time API-key comparison.
#include "server/http_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "server/constant_time.h"

namespace latent::server {
namespace {

using Result = HttpRequestParser::Result;

HttpParseLimits SmallLimits() {
  HttpParseLimits limits;
  limits.max_request_line_bytes = 64;
  limits.max_header_bytes = 256;
  limits.max_body_bytes = 32;
  return limits;
}

// Feeds `text` whole and parses to the end; returns the last result.
Result ParseAll(HttpRequestParser& parser, std::string& buffer) {
  for (;;) {
    const Result r = parser.Parse(buffer);
    if (r != Result::kHeaders) return r;
  }
}

TEST(HttpParserTest, ContentLengthRequest) {
  HttpRequestParser parser(SmallLimits());
  std::string buffer =
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX-Y:  z \r\n\r\nhello";
  EXPECT_EQ(parser.Parse(buffer), Result::kHeaders);
  EXPECT_EQ(parser.Parse(buffer), Result::kComplete);
  const HttpRequest& r = parser.request();
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.target, "/v1/completions?x=1");
  EXPECT_EQ(r.path, "/v1/completions");
  EXPECT_EQ(r.body, "hello");
  ASSERT_NE(r.Header("x-y"), nullptr);
  EXPECT_EQ(*r.Header("x-y"), "z");
  EXPECT_TRUE(r.KeepAlive());
  EXPECT_TRUE(buffer.empty());
}

TEST(HttpParserTest, ByteByByteAndPipelined) {
  const std::string one = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
  const std::string two = "POST /x HTTP/1.0\nContent-Length: 2\n\nab";
  HttpRequestParser parser(SmallLimits());
  std::string buffer;
  Result r = Result::kNeedMore;
  for (char c : one + two) {
    buffer.push_back(c);
    r = ParseAll(parser, buffer);
    if (r == Result::kComplete) break;
  }
  ASSERT_EQ(r, Result::kComplete);
  EXPECT_EQ(parser.request().path, "/health");
  // The rest of the bytes stay for the next request.
  parser.Reset();
  buffer += two.substr(buffer.size());
  EXPECT_EQ(ParseAll(parser, buffer), Result::kComplete);
  EXPECT_EQ(parser.request().path, "/x");
  EXPECT_EQ(parser.request().body, "ab");
  EXPECT_FALSE(parser.request().KeepAlive());  // HTTP/1.0 without keep-alive.
}

TEST(HttpParserTest, Chunked) {
  HttpRequestParser parser(SmallLimits());
  std::string buffer =
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n3\r\n, w\r\n0\r\n"
      "Trailer: x\r\n\r\nNEXT";
  EXPECT_EQ(ParseAll(parser, buffer), Result::kComplete);
  EXPECT_EQ(parser.request().body, "hello, w");
  EXPECT_EQ(buffer, "NEXT");
}

TEST(HttpParserTest, ViewParseConsumesPipelinedRequestsWithoutErasing) {
  const std::string input =
      "GET /a HTTP/1.1\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 2\r\n\r\nxyGET /c HTTP/1";
  HttpRequestParser parser(SmallLimits());
  size_t used = 0, consumed = 0;
  std::vector<std::string> paths;
  for (;;) {
    const Result r = parser.Parse(std::string_view(input).substr(used), consumed);
    used += consumed;
    if (r == Result::kHeaders) continue;
    if (r != Result::kComplete) {
      EXPECT_EQ(r, Result::kNeedMore);
      break;
    }
    paths.push_back(parser.request().path);
    if (parser.request().path == "/b") {
      EXPECT_EQ(parser.request().body, "xy");
    }
    parser.Reset();
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"/a", "/b"}));
  // The partial third request: only its leading blank lines (none here) are taken.
  EXPECT_EQ(input.substr(used), "GET /c HTTP/1");
}

TEST(HttpParserTest, EveryChunkedPhaseCountsAsBody) {
  // The server times a request in its body by the body timeout, its headers by the header one.
  HttpRequestParser parser(SmallLimits());
  std::string buffer = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_FALSE(parser.in_body());
  EXPECT_EQ(parser.Parse(buffer), Result::kHeaders);
  EXPECT_EQ(parser.Parse(buffer), Result::kNeedMore);
  EXPECT_TRUE(parser.in_body()) << "waiting for a chunk-size line";
  buffer = "2\r\nab";
  EXPECT_EQ(parser.Parse(buffer), Result::kNeedMore);
  EXPECT_TRUE(parser.in_body()) << "waiting for the chunk's CRLF";
  buffer = "\r\n0\r\nX-T: 1\r\n";
  EXPECT_EQ(parser.Parse(buffer), Result::kNeedMore);
  EXPECT_TRUE(parser.in_body()) << "in the trailers";
  buffer = "\r\n";
  EXPECT_EQ(parser.Parse(buffer), Result::kComplete);
  EXPECT_EQ(parser.request().body, "ab");
}

TEST(HttpParserTest, ChunkLinesAndTrailersAreBoundedWhenComplete) {
  // A chunk-size line with a long extension, sent whole.
  HttpRequestParser parser(SmallLimits());
  std::string buffer = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;ext=" +
                       std::string(2000, 'e') + "\r\na\r\n0\r\n\r\n";
  EXPECT_EQ(ParseAll(parser, buffer), Result::kError);
  EXPECT_EQ(parser.error_status(), 400);
  // Thousands of short trailer lines, each complete.
  HttpRequestParser trailers(SmallLimits());
  buffer = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n";
  for (int i = 0; i < 5000; ++i) buffer += "X: y\r\n";
  buffer += "\r\n";
  EXPECT_EQ(ParseAll(trailers, buffer), Result::kError);
  EXPECT_EQ(trailers.error_status(), 431);
  // A few trailer lines are fine.
  HttpRequestParser few(SmallLimits());
  buffer = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
           "1\r\nz\r\n0\r\nA: 1\r\nB: 2\r\n\r\n";
  EXPECT_EQ(ParseAll(few, buffer), Result::kComplete);
  EXPECT_EQ(few.request().body, "z");
}

TEST(HttpParserTest, Limits) {
  struct Case {
    std::string text;
    int status;
  };
  const Case cases[] = {
      {"GET /" + std::string(100, 'a') + " HTTP/1.1\r\n\r\n", 414},
      {"GET /" + std::string(100, 'a'), 414},  // No line end yet, already too long.
      {"GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\r\n\r\n", 431},
      {"POST / HTTP/1.1\r\nContent-Length: 33\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n21\r\n", 413},
      {"GET / HTTP/2.0\r\n\r\n", 400},
      // Garbage is refused on sight, before any line end or header end arrives.
      {std::string("\x16\x03\x01\x02\x00 client hello", 19), 400},
      {"GET / HTTP/1.1 and more\n", 400},
      {"GET /\r\n\r\n", 400},
      {"G@T / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nNo colon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400},
      {std::string("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", 26), 400},  // NUL in a value
      {"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400},                       // bare CR in a value
      {"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", 400},
  };
  for (const Case& c : cases) {
    HttpRequestParser parser(SmallLimits());
    std::string buffer = c.text;
    EXPECT_EQ(ParseAll(parser, buffer), Result::kError) << c.text;
    EXPECT_EQ(parser.error_status(), c.status) << c.text;
  }
}

TEST(HttpParserTest, IncompleteIsNotAnError) {
  HttpRequestParser parser(SmallLimits());
  std::string buffer = "POST / HTTP/1.1\r\nContent-Length: 10\r\n";
  EXPECT_EQ(parser.Parse(buffer), Result::kNeedMore);
  EXPECT_TRUE(parser.started());
  buffer += "\r\nabc";
  EXPECT_EQ(parser.Parse(buffer), Result::kHeaders);
  EXPECT_EQ(parser.Parse(buffer), Result::kNeedMore);
  EXPECT_TRUE(parser.in_body());
}

TEST(HttpParserTest, ConnectionAndExpect) {
  HttpRequestParser parser(SmallLimits());
  std::string buffer =
      "POST / HTTP/1.1\r\nConnection: Keep-Alive, Close\r\nExpect: 100-continue\r\n"
      "Content-Length: 1\r\n\r\n";
  EXPECT_EQ(parser.Parse(buffer), Result::kHeaders);
  EXPECT_FALSE(parser.request().KeepAlive());
  EXPECT_TRUE(parser.request().ExpectsContinue());
}

TEST(ConstantTimeEqualTest, Compares) {
  EXPECT_TRUE(ConstantTimeEqual("sekret", "sekret"));
  EXPECT_FALSE(ConstantTimeEqual("sekret2", "sekret"));
  EXPECT_FALSE(ConstantTimeEqual("sekre", "sekret"));
  EXPECT_FALSE(ConstantTimeEqual("sekreT", "sekret"));
  EXPECT_FALSE(ConstantTimeEqual("sekretsekret", "sekret"));  // The key repeated.
  EXPECT_FALSE(ConstantTimeEqual("", "sekret"));
  EXPECT_FALSE(ConstantTimeEqual("x", ""));
  EXPECT_TRUE(ConstantTimeEqual("", ""));
}

}  // namespace
}  // namespace latent::server
