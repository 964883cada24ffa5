#include "server/cors.h"

#include <algorithm>
#include <array>
#include <optional>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace latent::server {
namespace {

// Every method a browser may ask for (vLLM's --allowed-methods default "*" means these).
constexpr std::array<std::string_view, 7> kMethods = {"DELETE",  "GET",  "HEAD", "OPTIONS",
                                                      "PATCH",   "POST", "PUT"};
constexpr std::string_view kMethodList = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT";
// Seconds a browser may reuse a preflight's answer (Starlette's default, which vLLM keeps).
constexpr std::string_view kMaxAge = "600";

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsUpper(char c) { return c >= 'A' && c <= 'Z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Browsers serialize an Origin as "null" or scheme://host[:port]: ASCII (a host in punycode),
// lower case, no path, query, fragment or user info, and no port when it is the scheme's default.
// Why `entry` can never equal one, or nullopt when it can.
std::optional<std::string> WhyNotAnOrigin(std::string_view entry) {
  if (entry == "*" || entry == "null") return std::nullopt;
  for (const char c : entry) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return "whitespace, a control character or non-ASCII";
    if (c == '"' || c == '\'') return "quotes";
  }
  const size_t scheme_end = entry.find("://");
  if (scheme_end == std::string_view::npos || scheme_end == 0) return "no scheme://";
  const std::string_view scheme = entry.substr(0, scheme_end);
  for (const char c : scheme) {
    if (IsUpper(c)) return "upper case in the scheme";
    if (!IsLower(c) && !IsDigit(c) && c != '+' && c != '-' && c != '.') {
      return StrCat("'", std::string_view(&c, 1), "' in the scheme");
    }
  }
  std::string_view host = entry.substr(scheme_end + 3);
  const size_t authority_end = host.find_first_of("/?#");
  if (authority_end != std::string_view::npos) {
    const char c = host[authority_end];
    return c == '/' ? "a path" : c == '?' ? "a query" : "a fragment";
  }
  std::optional<std::string_view> port;  // after a ':'
  if (!host.empty() && host.front() == '[') {  // an IPv6 address: [::1]
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return "an unclosed '['";
    const std::string_view after = host.substr(close + 1);
    if (!after.empty() && after.front() != ':') return "text after ']'";
    if (!after.empty()) port = after.substr(1);
    for (const char c : host.substr(1, close - 1)) {
      if (IsUpper(c)) return "upper case in the host";
      if (!IsDigit(c) && !(c >= 'a' && c <= 'f') && c != ':' && c != '.') {
        return StrCat("'", std::string_view(&c, 1), "' in an IPv6 address");
      }
    }
    if (close == 1) return "no host";
  } else {
    const size_t colon = host.find(':');
    if (colon != std::string_view::npos) {
      port = host.substr(colon + 1);
      host = host.substr(0, colon);
    }
    if (host.empty()) return "no host";
    for (const char c : host) {
      if (IsUpper(c)) return "upper case in the host";
      if (c == '[' || c == ']') return "brackets";
      if (c == '@') return "user info";
      if (!IsLower(c) && !IsDigit(c) && c != '-' && c != '.' && c != '_') {
        return StrCat("'", std::string_view(&c, 1), "' in the host");
      }
    }
  }
  if (port) {
    // Browsers write the port in decimal, without leading zeros.
    if (port->empty() || port->size() > 5 || port->front() == '0' ||
        !std::all_of(port->begin(), port->end(), IsDigit) ||
        std::stoi(std::string(*port)) > 65535) {
      return "a port that is not a number from 1 to 65535";
    }
    if (((scheme == "http" || scheme == "ws") && *port == "80") ||
        ((scheme == "https" || scheme == "wss") && *port == "443")) {
      return "the scheme's default port, which browsers leave out";
    }
  }
  return std::nullopt;
}

// An Origin header no browser sends (control characters, DEL, non-ASCII, blanks inside): h11,
// under vLLM, refuses control characters in a header; such an origin is never allowed, so that it
// is never echoed into a response header.
bool IsOriginText(std::string_view origin) {
  return !origin.empty() && std::all_of(origin.begin(), origin.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7f;
  });
}

// An Access-Control-Request-Headers value a browser sends: header names (visible ASCII) with
// blanks and tabs between. vLLM's HTTP layer (h11 or httptools) refuses a request with control
// characters in a header and never writes them into a response; this one is echoed, so such a
// value (or DEL, or non-ASCII, which no header name holds) is refused instead.
bool IsHeaderListText(std::string_view asked) {
  return std::all_of(asked.begin(), asked.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u >= 0x20 && u < 0x7f) || c == '\t';
  });
}

bool AllowsAll(const CorsPolicy& policy) {
  return std::find(policy.allowed_origins.begin(), policy.allowed_origins.end(), "*") !=
         policy.allowed_origins.end();
}

bool Allows(const CorsPolicy& policy, const std::string& origin) {
  if (!IsOriginText(origin)) return false;
  return AllowsAll(policy) || std::find(policy.allowed_origins.begin(),
                                        policy.allowed_origins.end(),
                                        origin) != policy.allowed_origins.end();
}

}  // namespace

std::vector<std::string> ParseAllowedOrigins(std::string_view text) {
  std::vector<std::string> origins;
  if (!TrimBlanks(text).empty() && TrimBlanks(text).front() == '[') {
    // vLLM's flag takes a JSON list ('["https://app.example.com"]'); so does this one.
    const nlohmann::json list = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!list.is_array()) {
      Fail("--allowed-origins: '", text, "' starts with '[' but is not a JSON list of strings");
    }
    for (const nlohmann::json& entry : list) {
      if (!entry.is_string()) {
        Fail("--allowed-origins: the JSON list's entry ", entry.dump(), " is not a string");
      }
      origins.push_back(entry.get<std::string>());
    }
  } else {
    while (!text.empty()) {
      const size_t comma = text.find(',');
      const std::string_view entry = TrimBlanks(text.substr(0, comma));
      text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
      if (!entry.empty()) origins.emplace_back(entry);
    }
  }
  for (const std::string& origin : origins) {
    if (const std::optional<std::string> why = WhyNotAnOrigin(origin)) {
      Fail("--allowed-origins: '", origin, "' is not an origin as a browser sends it (", *why,
           "): give '*' or scheme://host[:port] in lower case, without a path, query or fragment "
           "(e.g. https://app.example.com)");
    }
  }
  return origins;
}

bool IsCorsPreflight(const HttpRequest& req) {
  return req.method == "OPTIONS" && req.Header("origin") &&
         req.Header("access-control-request-method");
}

HeaderList CorsResponseHeaders(const CorsPolicy& policy, const HttpRequest& req) {
  const std::string* origin = req.Header("origin");
  if (!origin || !Allows(policy, *origin)) return {};
  // A request with cookies gets its own origin back: browsers refuse "*" on it.
  if (AllowsAll(policy) && !req.Header("cookie")) return {{"Access-Control-Allow-Origin", "*"}};
  return {{"Access-Control-Allow-Origin", *origin}, {"Vary", "Origin"}};
}

CorsPreflightReply CorsPreflight(const CorsPolicy& policy, const HttpRequest& req) {
  const std::string& origin = *req.Header("origin");
  const std::string& method = *req.Header("access-control-request-method");
  CorsPreflightReply r;
  std::vector<std::string_view> refused;
  if (!AllowsAll(policy)) r.headers.emplace_back("Vary", "Origin");
  if (!Allows(policy, origin)) {
    refused.push_back("origin");
  } else {
    r.headers.emplace_back("Access-Control-Allow-Origin", AllowsAll(policy) ? "*" : origin);
  }
  if (std::find(kMethods.begin(), kMethods.end(), method) == kMethods.end()) {
    refused.push_back("method");
  }
  r.headers.emplace_back("Access-Control-Allow-Methods", std::string(kMethodList));
  r.headers.emplace_back("Access-Control-Max-Age", std::string(kMaxAge));
  // Every header is allowed: the ones asked for are echoed, unless no browser would send them
  // (then refused as Starlette refuses headers it does not allow, and never echoed).
  if (const std::string* asked = req.Header("access-control-request-headers")) {
    if (IsHeaderListText(*asked)) {
      r.headers.emplace_back("Access-Control-Allow-Headers", *asked);
    } else {
      refused.push_back("headers");
    }
  }
  if (refused.empty()) {
    r.body = "OK";
  } else {
    r.status = 400;
    r.body = "Disallowed CORS ";
    for (size_t i = 0; i < refused.size(); ++i) {
      r.body += StrCat(i ? ", " : "", refused[i]);
    }
  }
  return r;
}

}  // namespace latent::server
