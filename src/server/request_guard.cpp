#include "server/request_guard.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <memory>

#include "server/http_util.h"

namespace refit {

namespace {

// The admin routes: each changes or reads the weights (or their label), or stops or
// disturbs serving for everyone. A route not listed is ordinary; a new route of that kind
// must be added here.
constexpr std::array<std::string_view, 19> kAdminPaths = {
    // weights: from disk, tensors, a trainer's process group; read back; relabel; reload
    "/update_weights_from_disk",
    "/update_weights_from_tensor",
    "/init_weights_update_group",
    "/update_weights_from_distributed",
    "/destroy_weights_update_group",
    "/update_weight_version",
    "/get_weights_by_name",
    "/update_weights",
    "/reload_weights",
    // generation stopped and started again
    "/pause_generation",
    "/continue_generation",
    "/pause",
    "/resume",
    // memory given back (weights and KV cache), sleep and wake
    "/release_memory_occupation",
    "/resume_memory_occupation",
    "/sleep",
    "/wake_up",
    // the prefix cache dropped
    "/flush_cache",
    "/reset_prefix_cache",
};

// Probes that load balancers, Kubernetes and Prometheus call without secrets, as SGLang
// leaves them (/health* and /metrics) and vLLM (whose key guards /v1 only).
constexpr std::array<std::string_view, 3> kOpenPaths = {"/health", "/health_generate", "/metrics"};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A header value as it may appear in an error message: printable ASCII, at most 100 bytes.
std::string shown(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 100)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 100) out += "...";
  return out;
}

bool listed(const std::vector<std::string>& list, std::string_view value) {
  const std::string v = lower(value);
  return std::any_of(list.begin(), list.end(), [&](const std::string& e) {
    std::string entry = lower(trim(e));
    while (entry.size() > 1 && entry.back() == '/') entry.pop_back();
    return entry == "*" || entry == v;
  });
}

bool wildcard_address(std::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

HttpError forbidden(std::string message, std::string code) {
  return HttpError{403, std::move(message), "permission_error", {}, std::move(code)};
}

HttpError unauthorized(std::string message, std::string code) {
  return HttpError{401, std::move(message), "authentication_error", {}, std::move(code)};
}

// The token of "Bearer <token>" (the scheme in any case, as RFC 7235 says); nullopt when
// the header has another form.
std::optional<std::string_view> bearer_token(std::string_view header) {
  header = trim(header);
  constexpr std::string_view kScheme = "bearer";
  if (header.size() <= kScheme.size() || lower(header.substr(0, kScheme.size())) != kScheme ||
      (header[kScheme.size()] != ' ' && header[kScheme.size()] != '\t'))
    return std::nullopt;
  std::string_view token = trim(header.substr(kScheme.size()));
  if (token.empty()) return std::nullopt;
  return token;
}

bool changes_state(std::string_view method, std::string_view path) {
  if (method == "GET" || method == "HEAD" || method == "OPTIONS") return path == "/flush_cache";
  return true;
}

}  // namespace

void send_json_and_close(httplib::Response& res, int status, const nlohmann::json& body) {
  auto text = std::make_shared<std::string>(
      body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  res.status = status;
  res.set_header("Connection", "close");
  // cpp-httplib keeps a connection open whatever the answer says, unless writing it fails:
  // a content provider that has written every byte and then reports failure ends it.
  res.set_content_provider(text->size(), "application/json",
                           [text](size_t offset, size_t length, httplib::DataSink& sink) {
                             sink.write(text->data() + offset, length);
                             return false;
                           });
}

RouteAccess route_access(std::string_view method, std::string_view path) {
  (void)method;  // every admin path is admin whichever method reaches it (GET /flush_cache)
  if (std::find(kOpenPaths.begin(), kOpenPaths.end(), path) != kOpenPaths.end())
    return RouteAccess::open;
  if (std::find(kAdminPaths.begin(), kAdminPaths.end(), path) != kAdminPaths.end())
    return RouteAccess::admin;
  return RouteAccess::ordinary;
}

std::string host_of(std::string_view value) {
  value = trim(value);
  std::string_view host = value;
  if (!value.empty() && value.front() == '[') {
    const size_t end = value.find(']');
    host = end == std::string_view::npos ? value.substr(1) : value.substr(1, end - 1);
  } else if (std::count(value.begin(), value.end(), ':') == 1) {
    host = value.substr(0, value.find(':'));
  }
  std::string out = lower(host);
  if (out.size() > 1 && out.back() == '.') out.pop_back();  // "localhost." is localhost
  return out;
}

bool is_loopback_host(std::string_view host) {
  const std::string h = lower(host);
  if (h == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (std::memcmp(&v6, &in6addr_loopback, sizeof v6) == 0) return true;
    // ::ffff:127.x.y.z, an IPv4 loopback address written as IPv6
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(v6.s6_addr, mapped, 12) == 0 && v6.s6_addr[12] == 127;
  }
  return false;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of `a` is compared (against `b` cycled), so the time says nothing about
  // how many leading bytes were right.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  if (b.empty()) return a.empty();
  for (size_t i = 0; i < a.size(); ++i)
    diff = diff | static_cast<unsigned char>(a[i] ^ b[i % b.size()]);
  return diff == 0;
}

RequestGuard::RequestGuard(AccessOptions options, std::string bind_host)
    : options_(std::move(options)),
      bind_host_(host_of(bind_host)),
      loopback_bind_(is_loopback_host(host_of(bind_host))) {}

std::optional<HttpError> RequestGuard::check_host(const RequestHead& head) const {
  if (!loopback_bind_ && options_.allowed_hosts.empty()) return std::nullopt;
  if (!head.host) return std::nullopt;  // HTTP/1.0 without Host: never a browser
  const std::string host = host_of(*head.host);
  if (is_loopback_host(host) || listed(options_.allowed_hosts, *head.host) ||
      listed(options_.allowed_hosts, host) || (!wildcard_address(bind_host_) && host == bind_host_))
    return std::nullopt;
  return forbidden(
      fmt::format("the Host header names '{}', not this server: listening on {}, it answers "
                  "requests for {} only (name others with --allowed-hosts)",
                  shown(*head.host), bind_host_,
                  loopback_bind_ ? "localhost, 127.0.0.1 or [::1]" : "its --allowed-hosts"),
      "host_not_allowed");
}

std::optional<HttpError> RequestGuard::check_origin(const RequestHead& head) const {
  if (!head.origin || !changes_state(head.method, head.path)) return std::nullopt;
  const std::string_view origin = trim(*head.origin);
  const size_t scheme_end = origin.find("://");
  const std::string host =
      scheme_end == std::string_view::npos ? std::string() : host_of(origin.substr(scheme_end + 3));
  if (listed(options_.allowed_origins, origin) || (!host.empty() && is_loopback_host(host)) ||
      (!host.empty() && !wildcard_address(bind_host_) && host == bind_host_))
    return std::nullopt;
  return forbidden(fmt::format("{} {} from a web page of origin '{}' is refused: browser pages may "
                               "change this server only from loopback origins or those "
                               "--allowed-origins lists",
                               head.method, head.path, shown(origin)),
                   "origin_not_allowed");
}

std::optional<HttpError> RequestGuard::check_key(const RequestHead& head) const {
  if (head.method == "OPTIONS") return std::nullopt;  // a preflight carries no credentials
  const RouteAccess access = route_access(head.method, head.path);
  const std::string& user = options_.api_key;
  const std::string& admin = options_.admin_api_key;
  if (access == RouteAccess::open) return std::nullopt;
  // Ordinary routes: the API key when one is set (the admin key too); open otherwise, also
  // when only an admin key is set. Admin routes: the admin key when one is set, else the
  // API key (it then guards everything, as in SGLang); open when neither is.
  const bool admin_only = access == RouteAccess::admin && !admin.empty();
  if (!admin_only && user.empty()) return std::nullopt;
  const std::string route = fmt::format("{} {}", head.method, head.path);
  const char* wanted = admin_only ? "the admin key (--admin-api-key or REFIT_ADMIN_API_KEY)"
                                  : "an API key (--api-key or REFIT_API_KEY)";
  if (!head.authorization)
    return unauthorized(
        fmt::format("{} needs {}: send it as 'Authorization: Bearer <key>'", route, wanted),
        "missing_api_key");
  const std::optional<std::string_view> token = bearer_token(*head.authorization);
  if (!token)
    return unauthorized(
        fmt::format("{} needs {} as 'Authorization: Bearer <key>'; the Authorization header given "
                    "has another form",
                    route, wanted),
        "invalid_authorization_header");
  const bool is_admin = !admin.empty() && constant_time_equal(*token, admin);
  const bool is_user = !user.empty() && constant_time_equal(*token, user);
  if (is_admin || (!admin_only && is_user)) return std::nullopt;
  if (is_user)
    return forbidden(fmt::format("{} changes or reads the weights or stops serving: it needs {}, "
                                 "not the ordinary API key",
                                 route, wanted),
                     "admin_key_required");
  return unauthorized(fmt::format("{} needs {}: the key given is not this server's", route, wanted),
                      "invalid_api_key");
}

std::optional<HttpError> RequestGuard::check_content_type(const RequestHead& head) const {
  if (!head.has_body || (head.method != "POST" && head.method != "PUT" && head.method != "PATCH"))
    return std::nullopt;
  if (!head.content_type) return std::nullopt;  // read as JSON, as FastAPI reads it
  std::string_view type = *head.content_type;
  type = trim(type.substr(0, type.find(';')));
  const std::string media = lower(type);
  const bool json =
      media == "application/json" || (media.rfind("application/", 0) == 0 && media.size() > 17 &&
                                      media.compare(media.size() - 5, 5, "+json") == 0);
  if (json) return std::nullopt;
  return HttpError{415,
                   fmt::format("{} {} takes a JSON body: send it with 'Content-Type: "
                               "application/json', not '{}'",
                               head.method, head.path, shown(type)),
                   "invalid_request_error",
                   {},
                   "unsupported_media_type"};
}

std::optional<HttpError> RequestGuard::check(const RequestHead& head) const {
  if (auto e = check_host(head)) return e;
  if (auto e = check_origin(head)) return e;
  if (auto e = check_key(head)) return e;
  return check_content_type(head);
}

bool RequestGuard::refuse(const httplib::Request& req, httplib::Response& res) const {
  RequestHead head;
  head.method = req.method;
  head.path = req.path;
  auto header = [&](const char* name) -> std::optional<std::string> {
    if (!req.has_header(name)) return std::nullopt;
    return req.get_header_value(name);
  };
  head.host = header("Host");
  head.origin = header("Origin");
  head.authorization = header("Authorization");
  head.content_type = header("Content-Type");
  const std::optional<std::string> length = header("Content-Length");
  head.has_body = (length && std::strtoull(length->c_str(), nullptr, 10) > 0) ||
                  req.has_header("Transfer-Encoding");
  const std::optional<HttpError> refusal = check(head);
  if (!refusal) return false;
  if (refusal->status == 401) res.set_header("WWW-Authenticate", "Bearer");
  send_json_and_close(res, refusal->status, refusal->body());
  return true;
}

std::string RequestGuard::startup_warning() const {
  if (loopback_bind_ || !options_.api_key.empty() || !options_.admin_api_key.empty()) return "";
  return fmt::format(
      "refit serve: warning: listening on {} with no --api-key: anyone who can reach this port "
      "can generate, replace and read back the weights, pause the server and make it open any "
      "path it can read as a checkpoint; set --api-key and --admin-api-key (and --weights-root), "
      "see docs/security.md",
      bind_host_.empty() ? std::string("every address") : bind_host_);
}

}  // namespace refit
