#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <filesystem>

#include "parallel/rank_group.h"
#include "server/api_types.h"
#include "server/connection_server.h"
#include "server/http_util.h"
#include "server/rl_endpoints.h"
#include "server/weight_sync_endpoints.h"

namespace refit {

using nlohmann::json;

HttpServer::HttpServer(Engine& engine, ServerOptions options, RankGroup* ranks)
    : engine_(engine), options_(std::move(options)), ranks_(ranks), started_at_(unix_now()) {
  if (engine_.world_size() > 1 && !ranks_)
    fail("the model is sharded over {} ranks: the server needs their RankGroup",
         engine_.world_size());
  if (ranks_ && !ranks_->lead())
    fail("the HTTP server runs on rank 0 only (this is rank {})", ranks_->rank());
  if (options_.model_name.empty()) {
    const std::string& d = engine_.description();
    options_.model_name = d.find('/') != std::string::npos || std::filesystem::exists(d)
                              ? std::filesystem::path(d).filename().string()
                              : std::string("refit-demo");
    if (options_.model_name.empty())
      options_.model_name = std::filesystem::path(d).parent_path().filename().string();
  }
  const Tokenizer* tok = engine_.tokenizer();
  std::string bos, eos;
  if (tok) {
    if (tok->vocab().bos() >= 0) bos = tok->token_to_piece(tok->vocab().bos());
    if (tok->vocab().eos() >= 0) eos = tok->token_to_piece(tok->vocab().eos());
  }
  chat_template_ = load_chat_template(
      std::filesystem::exists(engine_.description()) ? engine_.description() : "",
      {options_.chat_template, bos, eos});
  StepForward forward;
  if (ranks_)
    forward = [r = ranks_](std::span<const BatchSequence> batch, PagedKvCache& cache) {
      return r->forward(batch, cache);
    };
  scheduler_ = std::make_unique<Scheduler>(
      engine_.model(), engine_.weights_mutex(), [this] { return engine_.weight_version(); },
      options_.scheduler, forward);
  // Released weights never serve a token, whichever route submits (health checks too).
  scheduler_->set_admission_check([this] { check_can_generate(); });
  // Every rank's pool gets the size the scheduler chose, before the first step.
  if (ranks_)
    ranks_->announce_cache(scheduler_->options().kv_blocks, scheduler_->options().block_size);
  auto connections = std::make_unique<ConnectionServer>(options_.connections);
  connections_ = connections.get();
  http_ = std::move(connections);
  http_->set_payload_max_length(size_t{8} << 30);  // tensor updates are large
  // Every other route's body is small: refused by its declared length before it is read
  // (64 MiB holds any prompt a context can take; tensors travel only to one route).
  http_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    constexpr size_t kBodyLimit = size_t{64} << 20;
    if (req.path == "/update_weights_from_tensor" || !req.has_header("Content-Length"))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string& length = req.get_header_value("Content-Length");
    const unsigned long long n = std::strtoull(length.c_str(), nullptr, 10);
    if (n <= kBodyLimit) return httplib::Server::HandlerResponse::Unhandled;
    send_json(res, 413,
              HttpError{413,
                        fmt::format("the request body ({} bytes) is over {}'s limit of {} bytes", n,
                                    req.path, kBodyLimit),
                        "invalid_request_error",
                        {},
                        "body_too_large"}
                  .body());
    return httplib::Server::HandlerResponse::Handled;
  });
  routes();
}

HttpServer::~HttpServer() {
  stop();
  scheduler_.reset();
}

void HttpServer::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host.c_str());
    if (port_ <= 0) fail("cannot listen on {}:<any port>", options_.host);
  } else {
    if (!http_->bind_to_port(options_.host.c_str(), options_.port))
      fail("cannot listen on {}:{} (in use, or not an address of this machine)", options_.host,
           options_.port);
    port_ = options_.port;
  }
  connections_->apply_listen_backlog();
}

void HttpServer::serve() { http_->listen_after_bind(); }
void HttpServer::stop() {
  if (connections_) connections_->stop_accepting();
}

std::string HttpServer::version_label(uint64_t version) const {
  std::lock_guard lock(labels_mutex_);
  auto it = labels_.find(version);
  return it != labels_.end() ? it->second : std::to_string(version);
}

HttpServer::Handler HttpServer::guarded(Handler handler) {
  return [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    ++http_requests_;
    try {
      handler(req, res);
      if (res.status >= 400) ++http_errors_;
      return;
    } catch (const HttpError& e) {
      send_json(res, e.status, e.body());
    } catch (const CapacityExceeded& e) {
      send_json(res, 503,
                HttpError{503, e.what(), "service_unavailable", {}, "server_busy"}.body());
    } catch (const Error& e) {
      send_json(res, 400, HttpError{400, e.what(), "invalid_request_error", {}, {}}.body());
    } catch (const std::exception& e) {
      send_json(res, 500,
                HttpError{500, std::string("internal error: ") + e.what(), "server_error", {}, {}}
                    .body());
    }
    ++http_errors_;
  };
}

int HttpServer::max_logprobs() const {
  return options_.max_logprobs < 0 ? static_cast<int>(engine_.config().vocab_size)
                                   : options_.max_logprobs;
}

// In this order (cpp-httplib tries a method's routes in the order they were added).
void HttpServer::routes() {
  openai_routes();
  monitoring_routes();
  RlContext rl{
      engine_, *scheduler_, labels_mutex_, labels_, [this](uint64_t v) { return version_label(v); },
      ranks_};
  register_rl_endpoints(*http_, rl);
  register_weight_sync_endpoints(*http_, rl);
  sglang_generate_routes();
  lifecycle_routes();
  vllm_routes();

  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_json(res, 404,
                HttpError{404,
                          fmt::format("no route {} {}", req.method, req.path),
                          "invalid_request_error",
                          {},
                          "not_found"}
                    .body());
  });
}

}  // namespace refit
