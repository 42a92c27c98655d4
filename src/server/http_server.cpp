#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <filesystem>

#include "models/moe_routing.h"
#include "parallel/rank_group.h"
#include "server/api_types.h"
#include "server/body_limits.h"
#include "server/connection_server.h"
#include "server/harmony_parser.h"
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
  if (options_.return_routed_experts && moe_routing_width(engine_.config()) == 0)
    fail("--enable-return-routed-experts: {} has no mixture-of-experts layers",
         engine_.description());
  if (options_.model_name.empty()) {
    const std::string& d = engine_.model_path();
    options_.model_name =
        !d.empty() ? std::filesystem::path(d).filename().string() : std::string("refit-demo");
    if (options_.model_name.empty())
      options_.model_name = std::filesystem::path(d).parent_path().filename().string();
  }
  const Tokenizer* tok = engine_.tokenizer();
  std::string bos, eos;
  if (tok) {
    if (tok->vocab().bos() >= 0) bos = tok->token_to_piece(tok->vocab().bos());
    if (tok->vocab().eos() >= 0) eos = tok->token_to_piece(tok->vocab().eos());
  }
  chat_template_ = load_chat_template(engine_.model_path(), {options_.chat_template, bos, eos});
  harmony_for(options_.reasoning_parser, tok);  // an unusable --reasoning-parser fails here
  StepForward forward;
  if (ranks_)
    forward = [r = ranks_](std::span<const BatchSequence> batch, PagedKvCache& cache) {
      return r->forward(batch, cache);
    };
  scheduler_ = std::make_unique<Scheduler>(
      engine_.model(), engine_.weights_mutex(), [this] { return engine_.weight_version(); },
      options_.scheduler, forward);
  prompt_limits_ = prompt_limits(engine_.tokenizer(), scheduler_->max_context());
  // Released weights never serve a token, whichever route submits (health checks too).
  scheduler_->set_admission_check([this] { check_can_generate(); });
  // Every rank's pool gets the size the scheduler chose, before the first step.
  if (ranks_)
    ranks_->announce_cache(scheduler_->options().kv_blocks, scheduler_->options().block_size);
  auto connections = std::make_unique<ConnectionServer>(options_.connections);
  connections_ = connections.get();
  http_ = std::move(connections);
  // Each route's body is refused by its declared length before it is read
  // (server/body_limits.h); a chunked one as soon as its bytes pass the limit (plus room
  // for the chunk framing: sizes and CRLFs, under 1/8 for chunks of 64 bytes or more).
  body_limits_ = body_limits_for(engine_, scheduler_->max_context(), options_.max_request_bytes);
  http_->set_payload_max_length(body_limits_.largest());
  connections_->set_body_limit([this](const std::string& path) {
    const size_t limit = body_limits_.for_path(path);
    return limit + limit / 8 + (size_t{64} << 10);
  });
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (guard_.refuse(req, res)) return httplib::Server::HandlerResponse::Handled;
    return refuse_oversized_body(body_limits_, req, res)
               ? httplib::Server::HandlerResponse::Handled
               : httplib::Server::HandlerResponse::Unhandled;
  });
  // Called once each reply is written, just before the request (and its body) is freed.
  http_->set_logger([this](const httplib::Request& req, const httplib::Response&) {
    trimmer_.note_request(req.body.size());
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
  RlContext rl{engine_,
               *scheduler_,
               labels_mutex_,
               labels_,
               [this](uint64_t v) { return version_label(v); },
               ranks_,
               options_.check_finite};
  rl.weights_root = &weights_root_;
  rl.max_readback_bytes = options_.max_readback_bytes;
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
