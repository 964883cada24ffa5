// CORS for `latent serve`: --allowed-origins' two spellings (vLLM's JSON list and a comma-separated
// list), the entries it refuses because no browser's Origin header could ever equal them, and
// Origin headers no browser sends, which are never allowed (so never echoed into a response).
#include "server/cors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "error_of.h"

namespace latent::server {
namespace {

using test::ErrorOf;
using ::testing::HasSubstr;

using Origins = std::vector<std::string>;

TEST(AllowedOrigins, CommaSeparatedListIsTrimmed) {
  EXPECT_EQ(ParseAllowedOrigins(" https://app.example.com, http://localhost:3000 "),
            (Origins{"https://app.example.com", "http://localhost:3000"}));
  EXPECT_EQ(ParseAllowedOrigins(""), Origins{});
  EXPECT_EQ(ParseAllowedOrigins(","), Origins{});
  EXPECT_EQ(ParseAllowedOrigins("*"), Origins{"*"});
}

TEST(AllowedOrigins, JsonListAsVllmTakesIt) {
  EXPECT_EQ(ParseAllowedOrigins(R"(["https://app.example.com", "http://localhost:3000"])"),
            (Origins{"https://app.example.com", "http://localhost:3000"}));
  EXPECT_EQ(ParseAllowedOrigins(R"( ["*"] )"), Origins{"*"});
  EXPECT_EQ(ParseAllowedOrigins("[]"), Origins{});
  EXPECT_THAT(ErrorOf([] { ParseAllowedOrigins(R"(["https://a.example")"); }),
              HasSubstr("not a JSON list of strings"));
  EXPECT_THAT(ErrorOf([] { ParseAllowedOrigins("[https://a.example]"); }),
              HasSubstr("'[https://a.example]' starts with '[' but is not a JSON list"));
  EXPECT_THAT(ErrorOf([] { ParseAllowedOrigins(R"(["https://a.example", 3])"); }),
              HasSubstr("entry 3 is not a string"));
  // JSON entries are taken as they are: blanks inside are refused, not trimmed.
  EXPECT_THAT(ErrorOf([] { ParseAllowedOrigins(R"([" https://a.example"])"); }),
              HasSubstr("' https://a.example' is not an origin"));
}

TEST(AllowedOrigins, AcceptsWhatBrowsersSend) {
  for (const std::string origin :
       {"*", "null", "https://app.example.com", "http://localhost:3000", "http://127.0.0.1:8000",
        "http://[::1]:8000", "https://xn--bcher-kva.example", "chrome-extension://abcdef",
        "https://a.example:8443", "http://a.example:443"}) {
    EXPECT_EQ(ParseAllowedOrigins(origin), Origins{origin});
  }
}

TEST(AllowedOrigins, RefusesWhatNoBrowserSends) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("https://app.example.com")", "quotes"},
      {"'https://app.example.com'", "quotes"},
      {"https://app.example.com/", "a path"},
      {"https://app.example.com/ui", "a path"},
      {"https://app.example.com?x=1", "a query"},
      {"https://app.example.com#top", "a fragment"},
      {"HTTPS://app.example.com", "upper case in the scheme"},
      {"https://App.example.com", "upper case in the host"},
      {"http://[::1]]", "text after ']'"},
      {"http://[::1", "an unclosed '['"},
      {"http://[::G]", "upper case in the host"},
      {"http://a[1]", "brackets"},
      {"https://user@app.example.com", "user info"},
      {"https://*.example.com", "'*' in the host"},
      {"https://app.example.com:", "a port that is not a number from 1 to 65535"},
      {"https://app.example.com:0", "a port that is not a number from 1 to 65535"},
      {"https://app.example.com:08", "a port that is not a number from 1 to 65535"},
      {"https://app.example.com:99999", "a port that is not a number from 1 to 65535"},
      {"https://app.example.com:x", "a port that is not a number from 1 to 65535"},
      {"https://app.example.com:443", "the scheme's default port"},
      {"http://localhost:80", "the scheme's default port"},
      {"https://b\xc3\xbc" "cher.example", "whitespace, a control character or non-ASCII"},
      {"https://a\x0b.example", "whitespace, a control character or non-ASCII"},
      {"https://", "no host"},
      {"app.example.com", "no scheme://"},
  };
  for (const auto& [entry, why] : cases) {
    const std::string error = ErrorOf([&] { ParseAllowedOrigins("http://ok.example," + entry); });
    EXPECT_THAT(error, HasSubstr("'" + entry + "' is not an origin")) << entry;
    EXPECT_THAT(error, HasSubstr("(" + why)) << entry;
  }
}

HttpRequest WithOrigin(const std::string& origin, bool cookie = false, bool preflight = false) {
  HttpRequest req;
  req.method = preflight ? "OPTIONS" : "GET";
  req.path = req.target = "/v1/models";
  req.headers = {{"origin", origin}};
  if (cookie) req.headers.emplace_back("cookie", "a=b");
  if (preflight) req.headers.emplace_back("access-control-request-method", "GET");
  return req;
}

TEST(CorsHeaders, AnOriginNoBrowserSendsIsNeverEchoed) {
  const CorsPolicy all;  // "*"
  EXPECT_EQ(CorsResponseHeaders(all, WithOrigin("https://a.example", true)),
            (HeaderList{{"Access-Control-Allow-Origin", "https://a.example"}, {"Vary", "Origin"}}));
  for (const std::string origin : {"https://a\x0bX", "https://a\x85", "https://a\x7f",
                                   "https://a b", "https://b\xc3\xbc" "cher.example"}) {
    for (const bool cookie : {false, true}) {
      EXPECT_EQ(CorsResponseHeaders(all, WithOrigin(origin, cookie)), HeaderList{}) << origin;
    }
    const CorsPreflightReply reply = CorsPreflight(all, WithOrigin(origin, false, true));
    EXPECT_EQ(reply.status, 400) << origin;
    EXPECT_EQ(reply.body, "Disallowed CORS origin");
    for (const auto& [name, value] : reply.headers) {
      EXPECT_NE(name, "Access-Control-Allow-Origin") << origin;
    }
  }
  const CorsPreflightReply ok = CorsPreflight(all, WithOrigin("https://a.example", false, true));
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.headers.front(), (std::pair<std::string, std::string>{
                                    "Access-Control-Allow-Origin", "*"}));
}

// Access-Control-Request-Headers is echoed as sent, unless it holds a byte no browser sends
// (control characters, DEL, non-ASCII): then the preflight is refused for its headers, as
// Starlette refuses headers it does not allow, and nothing of it is echoed.
TEST(CorsHeaders, RequestedHeadersNoBrowserSendsAreNeverEchoed) {
  const CorsPolicy all;  // "*"
  auto asking = [](const std::string& origin, const std::string& asked) {
    HttpRequest req = WithOrigin(origin, false, true);
    req.headers.emplace_back("access-control-request-headers", asked);
    return req;
  };
  auto allow_headers = [](const CorsPreflightReply& reply) -> std::optional<std::string> {
    for (const auto& [name, value] : reply.headers) {
      if (name == "Access-Control-Allow-Headers") return value;
    }
    return std::nullopt;
  };
  const std::vector<std::string> bad = {"x-a\x0bx-b", std::string("x-a\0", 4), "x-a\x1b[2J",
                                        "x-a\x7f", "x-\xc3\xa4", "x-a\r\nSet-Cookie: s=1"};
  for (const std::string& asked : bad) {
    const CorsPreflightReply reply = CorsPreflight(all, asking("https://a.example", asked));
    EXPECT_EQ(reply.status, 400) << asked;
    EXPECT_EQ(reply.body, "Disallowed CORS headers") << asked;
    EXPECT_EQ(allow_headers(reply), std::nullopt) << asked;
    EXPECT_EQ(reply.headers.front(), (std::pair<std::string, std::string>{
                                         "Access-Control-Allow-Origin", "*"}));
  }
  const CorsPreflightReply both = CorsPreflight(all, asking("https://a\x7f", "x\x01"));
  EXPECT_EQ(both.body, "Disallowed CORS origin, headers");
  const CorsPreflightReply ok =
      CorsPreflight(all, asking("https://a.example", "authorization,\tcontent-type"));
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(allow_headers(ok), "authorization,\tcontent-type");
}

}  // namespace
}  // namespace latent::server
