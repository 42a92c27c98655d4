// `refit serve`: the OpenAI-compatible HTTP API and SGLang's RL weight-update endpoints
// over one Engine and its continuous-batching Scheduler (cpp-httplib, nlohmann-json).
//
//   POST /v1/completions, /v1/chat/completions (stream: true -> server-sent events)
//   GET  /v1/models, /health, /metrics (Prometheus text), /get_weight_version
//   POST /update_weights_from_disk, /update_weights_from_tensor, /get_weights_by_name,
//        /pause_generation, /continue_generation, /flush_cache
//
// Every generation response carries "weight_version" (the label of the weights it ran
// on; per choice "weight_versions" lists each token's) and per choice "token_ids".
// Errors are OpenAI-style bodies {"error": {message, type, param, code}}; the RL endpoints
// answer {"success", "message", "weight_version"}. A failed request never stops the server.
// Who may call what (keys, Host/Origin, JSON bodies): server/request_guard.h, docs/security.md.
//
// Tensor parallel: on rank 0 of `mpirun -np N refit serve --tp N`, with a RankGroup
// (parallel/rank_group.h) that runs every step and weight update on all ranks.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "runtime/engine.h"
#include "runtime/scheduler.h"
#include "server/body_limits.h"
#include "server/chat_template.h"
#include "server/connection_limits.h"
#include "server/heap_trimmer.h"
#include "server/prompt_limits.h"
#include "server/request_guard.h"
#include "server/request_registry.h"
#include "server/weights_root.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace refit {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;         // 0: any free port (see HttpServer::port())
  std::string model_name;  // "model" field reported; default: the model path's file name
  // Connections: how many (a thread each), their request deadlines, the listen backlog.
  ConnectionLimits connections;
  SchedulerOptions scheduler;
  // What every reported logprob is computed from (vLLM's --logprobs-mode); SGLang's
  // /generate uses SGLang's own semantics unless this is set explicitly.
  LogprobMode logprobs_mode = LogprobMode::raw_logprobs;
  bool logprobs_mode_explicit = false;
  int max_logprobs = -1;      // top logprobs a request may ask for; -1: the whole vocabulary
  std::string chat_template;  // --chat-template: a file or the template text; empty: the model's
  AccessOptions access;       // keys, allowed hosts and origins, --weights-root (docs/security.md)
  bool check_finite = true;   // weight updates refuse NaN/inf unless a request says otherwise
  size_t max_request_bytes = 0;   // every route's body limit; 0: per route (server/body_limits.h)
  size_t max_readback_bytes = 0;  // /get_weights_by_name values per request; 0: the default
  // --reasoning-parser: auto (harmony when the vocabulary has its tokens), gpt-oss, none
  // (server/harmony_parser.h).
  std::string reasoning_parser = "auto";
  // --enable-return-routed-experts (vLLM's and SGLang's flag): every OpenAI choice carries
  // routed_experts, as vLLM does; /generate returns them when a request asks (always
  // allowed: capturing them costs nothing). A mixture-of-experts model only.
  bool return_routed_experts = false;
};

class RankGroup;
class ConnectionServer;

class HttpServer {
 public:
  // `ranks`: the tensor-parallel group when the engine is sharded (required then).
  HttpServer(Engine& engine, ServerOptions options, RankGroup* ranks = nullptr);
  ~HttpServer();
  // Binds; throws naming host:port when that fails. Then serves until stop().
  void bind();
  void serve();
  void stop();
  // SIGTERM's path: stops accepting connections, lets the requests in flight finish for up
  // to `drain` (none can while generation is paused: they end at once), then ends what is
  // left with finish_reason "abort" so every client is answered and serve() returns.
  void shutdown(std::chrono::milliseconds drain);
  // After serve() returned: stops the scheduler (pending requests end with "abort").
  void stop_scheduler() {
    std::lock_guard lock(shutdown_mutex_);  // never under a running shutdown()
    scheduler_.reset();
  }
  int port() const { return port_; }
  // For the operator at start (empty when there is nothing to warn about).
  std::string access_warning() const { return guard_.startup_warning(); }

 private:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  // Converts every exception of a handler into the right status and an OpenAI body.
  Handler guarded(Handler handler);
  void routes();
  void openai_routes();           // server/openai_endpoints.cpp
  void monitoring_routes();       // server/monitoring_endpoints.cpp
  void sglang_generate_routes();  // server/sglang_generate.cpp
  void sglang_generate(const httplib::Request& req, httplib::Response& res);  // POST /generate
  void lifecycle_routes();  // server/lifecycle_endpoints.cpp, in groups:
  void health_generate_route();
  void info_routes();
  void cache_routes();
  void abort_routes();
  void pause_routes();
  void memory_routes();  // SGLang's release/resume
  void sleep_routes();   // vLLM's sleep/wake_up
  nlohmann::json server_info() const;
  nlohmann::json load_report() const;
  // Gives the KV cache's and/or the weights' pages back (every rank's); the lead's bytes.
  size_t release_memory(bool weights, bool kv_cache);
  void vllm_routes();  // server/vllm_endpoints.cpp: tokens, then weights
  void vllm_token_routes();
  void vllm_weight_routes();
  // POST /v1/completions (chat false) and /v1/chat/completions (chat true).
  void openai_generation(const httplib::Request& req, httplib::Response& res, bool chat);
  // 503 naming what is missing while weights or KV memory are released.
  void check_can_generate() const;
  int max_logprobs() const;
  std::string version_label(uint64_t version) const;
  std::string current_version_label() const { return version_label(engine_.weight_version()); }

  Engine& engine_;
  ServerOptions options_;
  RankGroup* ranks_ = nullptr;
  ChatTemplate chat_template_;
  std::unique_ptr<Scheduler> scheduler_;
  HeapTrimmer trimmer_;         // before http_: its logger calls it until http_ is gone
  PromptLimits prompt_limits_;  // the context and the tokenizer's bytes per token
  BodyLimits body_limits_;
  std::unique_ptr<httplib::Server> http_;
  ConnectionServer* connections_ = nullptr;  // http_ as what it is (server/connection_server.h)
  RequestRegistry registry_;
  // Host, Origin, key and content-type checks of every request, before its route runs.
  const RequestGuard guard_{options_.access, options_.host};
  const WeightsRoot weights_root_{options_.access.weights_root};
  std::mutex shutdown_mutex_;  // shutdown() against stop_scheduler()
  int port_ = 0;
  mutable std::mutex labels_mutex_;
  std::map<uint64_t, std::string> labels_;  // weight version -> the label a refit gave it
  std::atomic<uint64_t> http_requests_{0}, http_errors_{0};
  const long started_at_;
};

}  // namespace refit
