// The server's lifecycle and control routes, under SGLang's names and vLLM's for the same
// things, as RL frameworks call them between rollouts:
//
//   GET  /health_generate             generates one token for real (503 when it cannot)
//   GET  /get_server_info, /server_info, /get_model_info, /get_weight_version, /is_sleeping,
//        /v1/loads (SGLang's load report: running and waiting requests, KV usage)
//   GET|POST /flush_cache              refused (400) while requests run, as SGLang does: clients
//   retry POST /reset_prefix_cache           vLLM's name; same effect, never refused POST
//   /abort_request {rid | abort_all} POST /pause_generation {mode: abort | retract | in_place},
//   /continue_generation POST /pause?wait_for_inflight_requests=&clear_cache=, /resume, GET
//   /is_paused   (vLLM) POST /release_memory_occupation {tags}, /resume_memory_occupation {tags}
//   (SGLang) POST /sleep?level=1|2, /wake_up?tags=                                          (vLLM)
//
// Memory release has real effect on a CPU engine. "kv_cache": the KV pool's pages go back
// to the OS (addresses kept) and no step runs until it is resumed. "weights" (vLLM level
// 2): the parameters' pages go back to the OS, so their values are gone; resuming maps
// them again, but generation stays refused (503, naming what is missing) until every
// checkpoint tensor has been sent again by any update route — refit never generates from
// released memory. vLLM's level 1 offloads weights to host memory, where a CPU engine's
// weights already are: it releases only the KV cache, and wake_up is exact.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "parallel/rank_group.h"
#include "server/api_types.h"
#include "server/http_server.h"
#include "server/http_util.h"
#include "server/request_fields.h"

namespace refit {

using nlohmann::json;

namespace {

// SGLang's tags: null/absent = all; else a list of "weights", "kv_cache" (and
// "cuda_graph", which a CPU engine has nothing for).
struct Tags {
  bool weights = false, kv_cache = false;
};

Tags parse_tags(const json& v, const char* field) {
  Tags t;
  if (v.is_null()) return Tags{true, true};
  if (!v.is_array())
    bad_request(field, fmt::format("'{}' must be a list of \"weights\", \"kv_cache\"", field));
  for (const auto& x : v) {
    const std::string tag = x.is_string() ? x.get<std::string>() : x.dump();
    if (tag == "weights")
      t.weights = true;
    else if (tag == "kv_cache")
      t.kv_cache = true;
    else if (tag == "cuda_graph")
      continue;
    else
      bad_request(field,
                  fmt::format("unknown memory tag '{}' (weights, kv_cache, cuda_graph)", tag));
  }
  return t;
}

std::string mib(size_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

// SGLang's answer to a control request: {success, message, weight_version} and `extra`.
void reply_ok(httplib::Response& res, const std::string& weight_version, const std::string& message,
              json extra = json::object()) {
  extra["success"] = true;
  extra["message"] = message;
  extra["weight_version"] = weight_version;
  send_json(res, 200, extra);
}

void reply_refused(httplib::Response& res, const std::string& weight_version, int status,
                   const std::string& message) {
  send_json(res, status,
            json{{"success", false}, {"message", message}, {"weight_version", weight_version}});
}

}  // namespace

void HttpServer::shutdown(std::chrono::milliseconds drain) {
  std::lock_guard lock(shutdown_mutex_);
  stop();
  const auto deadline = std::chrono::steady_clock::now() + drain;
  while (scheduler_ && scheduler_->unfinished() > 0 && !scheduler_->paused() &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (scheduler_ && scheduler_->unfinished() > 0) {
    std::fputs(fmt::format("refit serve: ending {} unfinished requests (finish_reason abort)\n",
                           scheduler_->unfinished())
                   .c_str(),
               stderr);
    scheduler_->pause(PauseMode::abort);
    scheduler_->resume();
  }
}

void HttpServer::check_can_generate() const {
  if (engine_.weights_released()) {
    const std::vector<std::string> missing = engine_.released_weights();
    throw HttpError{
        503,
        fmt::format(
            "the weights were released ({} checkpoint tensors not sent again, e.g. '{}'); resume "
            "them and send the weights (update_weights_from_*) before generating",
            missing.size(), missing.empty() ? std::string() : missing.front()),
        "service_unavailable",
        {},
        "weights_released"};
  }
  if (scheduler_->kv_released())
    throw HttpError{
        503,
        "the KV cache is released (sleeping); POST /resume_memory_occupation or /wake_up first",
        "service_unavailable",
        {},
        "kv_cache_released"};
}

// In this order (cpp-httplib tries a method's routes in the order they were added).
void HttpServer::lifecycle_routes() {
  health_generate_route();
  info_routes();
  cache_routes();
  abort_routes();
  pause_routes();
  memory_routes();
  sleep_routes();
}

void HttpServer::health_generate_route() {
  http_->Get(
      "/health_generate", guarded([this](const httplib::Request&, httplib::Response& res) {
        if (scheduler_->paused()) {  // alive; a generation would wait for /continue_generation
          send_json(res, 200, json{{"status", "ok"}, {"paused", true}});
          return;
        }
        RequestSpec spec;
        const Tokenizer* tok = engine_.tokenizer();
        const int32_t bos = tok && tok->vocab().bos() >= 0 ? tok->vocab().bos() : 0;
        spec.prompt = {bos};
        spec.max_tokens = 1;
        auto h = scheduler_->submit(spec);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        RequestHandle::Event e;
        while (std::chrono::steady_clock::now() < deadline) {
          if (!h->next(e, std::chrono::milliseconds(100))) continue;
          if (e.kind == RequestHandle::Event::token) {
            h->cancel();
            send_json(res, 200, json{{"status", "ok"}, {"token", e.token_event.token}});
            return;
          }
          if (e.kind == RequestHandle::Event::finished) break;
        }
        h->cancel();
        throw HttpError{503,
                        "health check: no token was generated within 20 s",
                        "service_unavailable",
                        {},
                        "unhealthy"};
      }));
}

json HttpServer::server_info() const {
  const SchedulerOptions& so = scheduler_->options();
  const SchedulerStats st = scheduler_->stats();
  return json{
      {"model_path", engine_.model_path()},
      {"served_model_name", options_.model_name},
      {"tokenizer_path", engine_.model_path()},
      {"tp_size", engine_.world_size()},
      {"dp_size", 1},
      {"context_length", scheduler_->max_context()},
      {"max_running_requests", so.max_running},
      {"max_total_tokens", so.kv_blocks * so.block_size},
      {"page_size", so.block_size},
      {"chunked_prefill_size", so.max_step_tokens},
      {"disable_radix_cache", !so.prefix_cache},
      {"enable_deterministic_inference", true},
      {"logprobs_mode",
       options_.logprobs_mode_explicit ? logprob_mode_name(options_.logprobs_mode) : "sglang"},
      {"max_logprobs", max_logprobs()},
      {"weight_version", current_version_label()},
      {"version", "refit 0.1.0"},
      {"engine", "refit"},
      {"is_paused", st.paused},
      {"is_sleeping", engine_.weights_released() || scheduler_->kv_released()},
      {"internal_states", json::array({json{{"num_running_reqs", st.running},
                                            {"num_waiting_reqs", st.waiting},
                                            {"kv_cache_usage", st.kv.usage()},
                                            {"weights_released", engine_.weights_released()},
                                            {"kv_cache_released", scheduler_->kv_released()}}})}};
}

// SGLang's load report (GetLoadsReqOutput), which slime polls after abort_all until the
// server is idle; ?include= sections are accepted, the core counters always sent.
json HttpServer::load_report() const {
  const SchedulerStats st = scheduler_->stats();
  const SchedulerOptions& so = scheduler_->options();
  const int64_t total = so.kv_blocks * so.block_size;
  const int64_t used = st.kv.used_blocks * so.block_size;
  json load{
      {"dp_rank", 0},
      {"timestamp", unix_now()},
      {"num_running_reqs", st.running},
      {"num_waiting_reqs", st.waiting},
      {"num_total_reqs", st.running + st.waiting},
      {"num_used_tokens", used},
      {"max_total_num_tokens", total},
      {"token_usage", st.kv.usage()},
      {"max_running_requests", so.max_running},
      {"cache_hit_rate", st.prefix_query_tokens ? static_cast<double>(st.prefix_hit_tokens) /
                                                      static_cast<double>(st.prefix_query_tokens)
                                                : 0.0},
      {"queues", json{{"waiting", st.waiting}}}};
  return json{{"timestamp", unix_now()}, {"dp_rank_count", 1}, {"loads", json::array({load})}};
}

void HttpServer::info_routes() {
  httplib::Server& s = *http_;
  auto server_info_route = [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, server_info());
  };
  s.Get("/get_server_info", guarded(server_info_route));
  s.Get("/server_info", guarded(server_info_route));
  s.Get("/v1/loads", guarded([this](const httplib::Request&, httplib::Response& res) {
          send_json(res, 200, load_report());
        }));
  s.Get("/get_model_info", guarded([this](const httplib::Request&, httplib::Response& res) {
          send_json(res, 200,
                    json{{"model_path", engine_.model_path()},
                         {"tokenizer_path",
                          engine_.tokenizer() ? json(engine_.model_path()) : json(nullptr)},
                         {"is_generation", true},
                         {"preferred_sampling_params", nullptr},
                         {"weight_version", current_version_label()},
                         {"has_image_understanding", false},
                         {"has_audio_understanding", false},
                         {"model_type", "llama"},
                         {"architectures", json::array({"LlamaForCausalLM"})},
                         {"vocab_size", engine_.config().vocab_size},
                         {"max_context_length", scheduler_->max_context()}});
        }));
  s.Get("/get_weight_version", guarded([this](const httplib::Request&, httplib::Response& res) {
          const uint64_t v = engine_.weight_version();
          send_json(res, 200,
                    json{{"success", true},
                         {"message", "ok"},
                         {"weight_version", version_label(v)},
                         {"version", v}});
        }));
}

void HttpServer::cache_routes() {
  httplib::Server& s = *http_;
  // SGLang refuses to flush while requests run (its clients retry until it succeeds).
  auto flush = [this](const httplib::Request&, httplib::Response& res) {
    const int64_t unfinished = scheduler_->unfinished();
    if (unfinished > 0) {
      reply_refused(res, current_version_label(), 400,
                    fmt::format("Cache not flushed because there are {} pending requests; retry",
                                unfinished));
      return;
    }
    const int64_t dropped = scheduler_->flush_cache();
    reply_ok(res, current_version_label(),
             fmt::format("Cache flushed ({} cached KV blocks dropped)", dropped),
             json{{"flushed_cache_blocks", dropped}});
  };
  s.Get("/flush_cache", guarded(flush));
  s.Post("/flush_cache", guarded(flush));
  s.Post("/reset_prefix_cache", guarded([this](const httplib::Request&, httplib::Response& res) {
           const int64_t dropped = scheduler_->flush_cache();
           reply_ok(res, current_version_label(),
                    fmt::format("prefix cache reset ({} cached KV blocks dropped)", dropped),
                    json{{"flushed_cache_blocks", dropped}});
         }));
}

void HttpServer::abort_routes() {
  http_->Post(
      "/abort_request", guarded([this](const httplib::Request& req, httplib::Response& res) {
        const json body = object_body(req);
        ignore_unknown_fields(body, {"rid", "abort_all", "finished_reason", "abort_message"},
                              "/abort_request");
        const bool all =
            body.contains("abort_all") && !body["abort_all"].is_null() &&
            (body["abort_all"].is_boolean()
                 ? body["abort_all"].get<bool>()
                 : (bad_request("abort_all", "'abort_all' must be true or false"), false));
        std::string rid;
        if (body.contains("rid") && !body["rid"].is_null()) {
          if (!body["rid"].is_string()) bad_request("rid", "'rid' must be a string");
          rid = body["rid"].get<std::string>();
        }
        if (!all && rid.empty())
          bad_request("rid", "give 'rid' (the request to abort) or 'abort_all': true");
        const size_t n = all ? registry_.abort_all() : registry_.abort(rid);
        send_json(res, 200,
                  json{{"success", true},
                       {"aborted", n},
                       {"message", fmt::format("{} requests aborted", n)}});
      }));
}

// SGLang's /pause_generation and /continue_generation, then vLLM's /pause, /resume, /is_paused.
void HttpServer::pause_routes() {
  httplib::Server& s = *http_;
  s.Post("/pause_generation", guarded([this](const httplib::Request& req, httplib::Response& res) {
           const json body = object_body(req);
           ignore_unknown_fields(body, {"mode"}, "/pause_generation");
           std::string mode = "abort";
           if (body.contains("mode") && !body["mode"].is_null()) {
             if (!body["mode"].is_string())
               bad_request("mode", "'mode' must be a string: abort, retract or in_place");
             mode = body["mode"].get<std::string>();
           }
           PauseMode m;
           try {
             m = pause_mode_from_name(mode);
           } catch (const Error& e) {
             bad_request("mode", e.what());
           }
           if (m == PauseMode::drain)
             bad_request("mode", "mode must be abort, retract or in_place");
           scheduler_->pause(m);
           reply_ok(res, current_version_label(),
                    fmt::format("generation paused ({})", pause_mode_name(m)));
         }));
  s.Post("/continue_generation", guarded([this](const httplib::Request&, httplib::Response& res) {
           scheduler_->resume();
           reply_ok(res, current_version_label(), "generation continues");
         }));
  // vLLM: POST /pause aborts what is in flight unless wait_for_inflight_requests, then
  // (clear_cache, default true) resets the prefix cache.
  s.Post("/pause", guarded([this](const httplib::Request& req, httplib::Response& res) {
           auto flag = [&](const char* name, bool fallback) {
             if (!req.has_param(name)) return fallback;
             const std::string v = req.get_param_value(name);
             if (v == "true" || v == "True" || v == "1") return true;
             if (v == "false" || v == "False" || v == "0") return false;
             bad_request(name, fmt::format("'{}' must be true or false, got '{}'", name, v));
           };
           const bool wait = flag("wait_for_inflight_requests", false);
           const bool clear = flag("clear_cache", true);
           scheduler_->pause(wait ? PauseMode::drain : PauseMode::abort);
           if (clear) scheduler_->flush_cache();
           reply_ok(res, current_version_label(), "generation paused");
         }));
  s.Post("/resume", guarded([this](const httplib::Request&, httplib::Response& res) {
           scheduler_->resume();
           reply_ok(res, current_version_label(), "generation resumed");
         }));
  s.Get("/is_paused", guarded([this](const httplib::Request&, httplib::Response& res) {
          send_json(res, 200, json{{"is_paused", scheduler_->paused()}});
        }));
}

// Memory release: the lead's own pages (the bytes reported), then every worker's.
size_t HttpServer::release_memory(bool weights, bool kv_cache) {
  size_t bytes = 0;
  if (kv_cache) bytes += scheduler_->release_kv_memory();
  if (weights) {
    if (!kv_cache && scheduler_->unfinished() > 0)
      fail("{} requests are unfinished; pause generation before releasing the weights",
           scheduler_->unfinished());
    // Engine::release_weights takes the weights' write lock: it lands between two steps.
    bytes += engine_.release_weights();
  }
  if (ranks_) ranks_->release_memory(weights, kv_cache);
  return bytes;
}

// SGLang's /release_memory_occupation and /resume_memory_occupation {tags}.
void HttpServer::memory_routes() {
  httplib::Server& s = *http_;
  s.Post("/release_memory_occupation",
         guarded([this](const httplib::Request& req, httplib::Response& res) {
           const json body = object_body(req);
           ignore_unknown_fields(body, {"tags"}, "/release_memory_occupation");
           const Tags tags = parse_tags(body.value("tags", json()), "tags");
           const size_t bytes = release_memory(tags.weights, tags.kv_cache);
           reply_ok(
               res, current_version_label(),
               fmt::format("released {}{}({} returned to the OS)", tags.weights ? "weights " : "",
                           tags.kv_cache ? "kv_cache " : "", mib(bytes)),
               json{{"released_bytes", bytes}});
         }));
  s.Post("/resume_memory_occupation",
         guarded([this](const httplib::Request& req, httplib::Response& res) {
           const json body = object_body(req);
           ignore_unknown_fields(body, {"tags"}, "/resume_memory_occupation");
           const Tags tags = parse_tags(body.value("tags", json()), "tags");
           if (tags.kv_cache) scheduler_->resume_kv_memory();
           // Weights: their pages come back on the first write; the values come from the next
           // update (check_can_generate says which are still missing).
           reply_ok(res, current_version_label(),
                    engine_.weights_released()
                        ? fmt::format(
                              "resumed; {} checkpoint tensors must still be sent before generating",
                              engine_.released_weights().size())
                        : "resumed");
         }));
}

// vLLM's /sleep?level=, /wake_up?tags=, /is_sleeping.
void HttpServer::sleep_routes() {
  httplib::Server& s = *http_;
  s.Post("/sleep", guarded([this](const httplib::Request& req, httplib::Response& res) {
           int level = 1;
           if (req.has_param("level")) {
             const std::string v = req.get_param_value("level");
             if (v != "1" && v != "2")
               bad_request("level", fmt::format("'level' must be 1 or 2, got '{}'", v));
             level = v == "2" ? 2 : 1;
           }
           // Whatever is in flight ends ("abort") first: its KV is about to go.
           if (scheduler_->unfinished() > 0) {
             const bool was_paused = scheduler_->paused();
             scheduler_->pause(PauseMode::abort);
             if (!was_paused) scheduler_->resume();  // a client's own pause stays
           }
           const size_t bytes = release_memory(/*weights=*/level == 2, /*kv_cache=*/true);
           reply_ok(res, current_version_label(),
                    fmt::format("sleeping (level {}; {} returned to the OS)", level, mib(bytes)),
                    json{{"released_bytes", bytes}});
         }));
  s.Post("/wake_up", guarded([this](const httplib::Request& req, httplib::Response& res) {
           bool kv = true;
           if (req.has_param("tags")) {
             kv = false;
             for (size_t i = 0; i < req.get_param_value_count("tags"); ++i) {
               const std::string tag = req.get_param_value("tags", i);
               if (tag == "kv_cache")
                 kv = true;
               else if (tag != "weights")
                 bad_request("tags", fmt::format("unknown tag '{}' (weights, kv_cache)", tag));
             }
           }
           if (kv) scheduler_->resume_kv_memory();
           reply_ok(res, current_version_label(), "awake");
         }));
  s.Get("/is_sleeping", guarded([this](const httplib::Request&, httplib::Response& res) {
          send_json(res, 200,
                    json{{"is_sleeping", engine_.weights_released() || scheduler_->kv_released()}});
        }));
}

}  // namespace refit
