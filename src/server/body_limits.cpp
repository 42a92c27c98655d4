#include "server/body_limits.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "runtime/engine.h"
#include "server/api_types.h"
#include "server/http_util.h"
#include "server/request_guard.h"
#include "tokenizer/token_byte_bound.h"
#include "tokenizer/tokenizer.h"

namespace refit {

namespace {

const std::set<std::string>& generation_routes() {
  static const std::set<std::string> routes = {"/v1/completions", "/v1/chat/completions",
                                               "/generate", "/tokenize", "/detokenize"};
  return routes;
}

// a * b, saturating.
size_t times(size_t a, size_t b) {
  if (a != 0 && b > SIZE_MAX / a) return SIZE_MAX;
  return a * b;
}

}  // namespace

size_t BodyLimits::for_path(const std::string& path) const {
  if (path == "/update_weights_from_tensor") return tensor;
  if (path == "/update_weights_from_distributed" || path == "/init_weights_update_group")
    return metadata;
  if (generation_routes().count(path)) return generation;
  return other;
}

size_t BodyLimits::largest() const { return std::max({generation, tensor, metadata, other}); }

BodyLimits body_limits(const BodyLimitInputs& in) {
  BodyLimits limits;
  if (in.override_bytes > 0) {
    limits.generation = limits.tensor = limits.metadata = limits.other = in.override_bytes;
    return limits;
  }
  const size_t per_token = in.text_bytes_per_token > 0 ? in.text_bytes_per_token : 64;
  limits.generation =
      std::max(limits.generation,
               times(times(static_cast<size_t>(std::max<int64_t>(in.context, 0)), per_token), 8));
  const size_t update =
      times(static_cast<size_t>(std::max<int64_t>(in.parameter_elements, 0)), 16) / 3;
  limits.tensor = update > SIZE_MAX - (size_t{64} << 20) ? SIZE_MAX : update + (size_t{64} << 20);
  return limits;
}

BodyLimits body_limits_for(const Engine& engine, int64_t context, size_t override_bytes) {
  BodyLimitInputs in;
  in.context = context;
  if (const Tokenizer* tok = engine.tokenizer())
    in.text_bytes_per_token = max_text_bytes_per_token(tok->vocab());
  for (const ParameterInfo& p : engine.named_parameters()) {
    int64_t n = 1;
    for (int64_t d : p.logical_shape) n *= d;
    in.parameter_elements += n;
  }
  in.override_bytes = override_bytes;
  return body_limits(in);
}

bool refuse_oversized_body(const BodyLimits& limits, const httplib::Request& req,
                           httplib::Response& res) {
  if (!req.has_header("Content-Length")) return false;
  const size_t limit = limits.for_path(req.path);
  const std::string& length = req.get_header_value("Content-Length");
  const unsigned long long n = std::strtoull(length.c_str(), nullptr, 10);
  if (n <= limit) return false;
  // Closed after the answer: the unread body must not be parsed as the next request.
  send_json_and_close(
      res, 413,
      HttpError{413,
                fmt::format("the request body ({} bytes) is over {}'s limit of {} bytes "
                            "(--max-request-bytes)",
                            n, req.path, limit),
                "invalid_request_error",
                {},
                "body_too_large"}
          .body());
  return true;
}

}  // namespace refit
