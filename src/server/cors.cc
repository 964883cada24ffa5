#include "server/cors.h"

#include <algorithm>
#include <array>

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

bool AllowsAll(const CorsPolicy& policy) {
  return std::find(policy.allowed_origins.begin(), policy.allowed_origins.end(), "*") !=
         policy.allowed_origins.end();
}

bool Allows(const CorsPolicy& policy, const std::string& origin) {
  return AllowsAll(policy) || std::find(policy.allowed_origins.begin(),
                                        policy.allowed_origins.end(),
                                        origin) != policy.allowed_origins.end();
}

}  // namespace

std::vector<std::string> ParseAllowedOrigins(std::string_view text) {
  std::vector<std::string> origins;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view entry = TrimBlanks(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (entry.empty()) continue;
    // An Origin header is "null" or scheme://host[:port], never with a path.
    const size_t scheme_end = entry.find("://");
    const bool origin_shape =
        scheme_end != std::string_view::npos && scheme_end > 0 &&
        scheme_end + 3 < entry.size() &&
        entry.find_first_of("/ \t", scheme_end + 3) == std::string_view::npos &&
        entry.substr(0, scheme_end).find_first_of(" \t") == std::string_view::npos;
    if (entry != "*" && entry != "null" && !origin_shape) {
      Fail("--allowed-origins: '", entry,
           "' is not an origin: give '*' or scheme://host[:port] as a browser sends it, without "
           "a path (e.g. https://app.example.com)");
    }
    origins.emplace_back(entry);
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
  if (AllowsAll(policy)) {
    r.headers.emplace_back("Access-Control-Allow-Origin", "*");
  } else {
    r.headers.emplace_back("Vary", "Origin");
    if (Allows(policy, origin)) {
      r.headers.emplace_back("Access-Control-Allow-Origin", origin);
    } else {
      refused.push_back("origin");
    }
  }
  if (std::find(kMethods.begin(), kMethods.end(), method) == kMethods.end()) {
    refused.push_back("method");
  }
  r.headers.emplace_back("Access-Control-Allow-Methods", std::string(kMethodList));
  r.headers.emplace_back("Access-Control-Max-Age", std::string(kMaxAge));
  // Every header is allowed: the ones asked for are echoed.
  if (const std::string* asked = req.Header("access-control-request-headers")) {
    r.headers.emplace_back("Access-Control-Allow-Headers", *asked);
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
