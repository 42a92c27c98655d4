#include "server/http_util.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <random>

#include "server/api_types.h"

namespace refit {

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}-{:x}{:04x}", prefix, rng() & 0xffffffffffffULL,
                     counter.fetch_add(1) & 0xffff);
}

long unix_now() {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count());
}

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

nlohmann::json object_body(const httplib::Request& req) {
  nlohmann::json j = req.body.empty() ? nlohmann::json::object() : parse_json_body(req.body);
  if (!j.is_object())
    throw HttpError{400, "the request body must be a JSON object", "invalid_request_error", {}, {}};
  return j;
}

}  // namespace refit
