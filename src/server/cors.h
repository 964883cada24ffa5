// Cross-origin resource sharing for `latent serve`: what lets a web page on another origin call
// the API from a browser. It follows vLLM's server, which answers through Starlette's
// CORSMiddleware with every method and header allowed, no credentials, and the origins of
// --allowed-origins (default "*"):
//
// - A request with an Origin header the policy allows gets Access-Control-Allow-Origin on its
//   response, whatever the route or status (errors and streams too, so that the page can read
//   them): "*" when every origin is allowed (the Origin itself, with Vary: Origin, when the
//   request carries a Cookie, since browsers refuse "*" there), else the Origin, with Vary.
// - A preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered on any path,
//   before routing and the API key (browsers send no credentials on a preflight): 200 "OK" with
//   the allowed methods, the requested headers echoed, and Max-Age 600; 400 "Disallowed CORS
//   origin" (or method) with the same headers when the origin or the method is not allowed.
// - A request without Origin is not a CORS request: nothing is added.
// - An Origin no browser sends (control characters, blanks, non-ASCII) is never allowed, even
//   under "*", so that it is never echoed into a header: no CORS headers, and a preflight's 400.
//   Likewise an Access-Control-Request-Headers holding control characters, DEL or non-ASCII is
//   not echoed: the preflight's 400 "Disallowed CORS headers" (Starlette's words when it refuses
//   headers).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http_parser.h"

namespace latent::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct CorsPolicy {
  // Origins as browsers send them ("https://app.example.com"); "*" allows any. Empty: none.
  std::vector<std::string> allowed_origins = {"*"};
};

// --allowed-origins: a JSON list of strings when it starts with '[' (vLLM's syntax:
// '["https://app.example.com"]'), else a comma-separated list, entries trimmed ("", "," and "[]"
// allow no origin). An entry that can never equal an Origin header as browsers serialize it
// (quotes, blanks, control characters or non-ASCII, upper case in the scheme or host, a path,
// query, fragment or user info, a bad or default port) is refused with latent::Error naming it.
std::vector<std::string> ParseAllowedOrigins(std::string_view text);

// True for a preflight request (answered by CorsPreflight, not by a route).
bool IsCorsPreflight(const HttpRequest& req);

// The CORS headers of the response to a request that is not a preflight; empty when it has no
// Origin or the policy does not allow it.
HeaderList CorsResponseHeaders(const CorsPolicy& policy, const HttpRequest& req);

struct CorsPreflightReply {
  int status = 200;  // 200, or 400 when the origin, method or asked headers are not allowed.
  std::string body;  // Plain text: "OK", or "Disallowed CORS origin, method, headers".
  HeaderList headers;
};

// The answer to a preflight (IsCorsPreflight(req) must hold).
CorsPreflightReply CorsPreflight(const CorsPolicy& policy, const HttpRequest& req);

}  // namespace latent::server
