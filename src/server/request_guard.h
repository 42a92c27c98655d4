// Who may drive `refit serve`: the checks every request passes before its route runs
// (from the server's pre-routing handler, before the body is read), in this order:
//
//   Host     bound to a loopback address, the Host header must name loopback (localhost,
//            127.0.0.0/8, [::1], any port) or an --allowed-hosts entry: a web page that
//            rebinds its own DNS name to 127.0.0.1 cannot reach the server (403).
//   Origin   a request that changes something (every method but GET/HEAD/OPTIONS, and
//            GET /flush_cache) from a browser page whose origin is not loopback, the
//            server's own address or an --allowed-origins entry is refused (403).
//   Key      with --api-key, every route but the probes (/health, /health_generate,
//            /metrics) needs `Authorization: Bearer <key>` (401 without it or with a key
//            that is not the server's). With --admin-api-key, the admin routes (weights,
//            pause, memory, sleep, cache; route_access below) need the admin key: the
//            ordinary key is refused there (403). The admin key opens every route.
//   Type     a POST body must be JSON: a Content-Type other than application/json (or
//            application/...+json) is refused (415); none at all is read as JSON, as
//            FastAPI (vLLM, SGLang) does for clients that send a bare string body.
//
// docs/security.md gives the threat model. Every check is a pure function of the request
// head, so tests need no sockets.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_types.h"  // HttpError

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace refit {

struct AccessOptions {
  std::string api_key;        // --api-key / REFIT_API_KEY; empty: no key asked on any route
  std::string admin_api_key;  // --admin-api-key / REFIT_ADMIN_API_KEY; empty: see RouteAccess
  std::vector<std::string> allowed_hosts;    // Host values taken besides loopback; "*": any
  std::vector<std::string> allowed_origins;  // browser origins taken besides loopback; "*": any
  std::string weights_root;  // --weights-root (server/weights_root.h); empty: any path
};

enum class RouteAccess {
  open,      // liveness probes and metrics: never a key (load balancers, Prometheus)
  ordinary,  // generation, tokens, info, and every path not known: the API key
  admin,     // changes or reads the weights, or stops serving: the admin key
};
RouteAccess route_access(std::string_view method, std::string_view path);

// What a check looks at: the request line and four headers (nullopt: header absent).
struct RequestHead {
  std::string method, path;
  std::optional<std::string> host, origin, authorization, content_type;
  bool has_body = false;  // a Content-Length above 0, or a chunked body
};

// Answers `body` and then ends the connection. For a refusal made before the request's body
// was read: on a kept-alive connection those bytes would be taken for the next request.
void send_json_and_close(httplib::Response& res, int status, const nlohmann::json& body);

// "localhost", "127.0.0.1", "::1" ... the host of a Host header or URL, without port or
// brackets (lower case).
bool is_loopback_host(std::string_view host);
// The host of a Host header value ("[::1]:8000" -> "::1", "Example.com:80" -> "example.com").
std::string host_of(std::string_view host_header);
// Compares in time that depends on the lengths only, never on where the bytes differ.
bool constant_time_equal(std::string_view a, std::string_view b);

class RequestGuard {
 public:
  // `bind_host`: the address the server listens on (decides the Host check).
  RequestGuard(AccessOptions options, std::string bind_host);

  std::optional<HttpError> check_host(const RequestHead& head) const;
  std::optional<HttpError> check_origin(const RequestHead& head) const;
  std::optional<HttpError> check_key(const RequestHead& head) const;
  std::optional<HttpError> check_content_type(const RequestHead& head) const;
  // The first of the four that refuses, in the order above.
  std::optional<HttpError> check(const RequestHead& head) const;

  // Answers a refused request (OpenAI-style body; 401 with WWW-Authenticate) and says so.
  bool refuse(const httplib::Request& req, httplib::Response& res) const;

  // A line for the operator when the server is reachable from other machines with no key
  // at all; empty otherwise.
  std::string startup_warning() const;

 private:
  AccessOptions options_;
  std::string bind_host_;
  bool loopback_bind_ = false;
};

}  // namespace refit
