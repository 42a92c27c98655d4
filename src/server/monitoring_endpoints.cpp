// What monitoring polls: GET /health (the process answers) and GET /metrics (Prometheus
// text: requests, tokens, the KV cache and prefix cache, steps, weight updates, HTTP).
#include <fmt/format.h>

#include "server/http_server.h"
#include "server/http_util.h"

namespace refit {

using nlohmann::json;

namespace {

// The counters are read as the text is written, as a scrape sees them.
std::string prometheus_text(const SchedulerStats& st, const Engine& engine,
                            const std::atomic<uint64_t>& http_requests,
                            const std::atomic<uint64_t>& http_errors) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, const std::string& value,
                    const char* labels = "") {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{} {}\n", name, help, name, type, name,
                       labels, value);
  };
  out +=
      "# HELP refit_requests_total Generation requests that ended, by outcome.\n# TYPE "
      "refit_requests_total counter\n";
  out += fmt::format("refit_requests_total{{outcome=\"finished\"}} {}\n", st.requests_finished);
  out += fmt::format("refit_requests_total{{outcome=\"aborted\"}} {}\n", st.requests_aborted);
  out += fmt::format("refit_requests_total{{outcome=\"rejected\"}} {}\n", st.requests_rejected);
  metric("refit_prompt_tokens_total", "counter", "Prompt tokens processed.",
         std::to_string(st.prompt_tokens));
  metric("refit_generation_tokens_total", "counter", "Tokens generated.",
         std::to_string(st.generated_tokens));
  metric("refit_running_requests", "gauge", "Requests in the running batch.",
         std::to_string(st.running));
  metric("refit_queue_depth", "gauge", "Requests waiting for admission.",
         std::to_string(st.waiting));
  metric("refit_kv_cache_usage_ratio", "gauge", "Fraction of KV-cache blocks in use.",
         fmt::format("{:.6f}", st.kv.usage()));
  metric("refit_kv_cache_blocks_used", "gauge", "KV-cache blocks in use.",
         std::to_string(st.kv.used_blocks));
  metric("refit_kv_cache_blocks_total", "gauge", "KV-cache blocks in the pool.",
         std::to_string(st.kv.total_blocks));
  metric("refit_prefix_cache_queries_total", "counter",
         "Tokens looked up in the prefix cache at admission.",
         std::to_string(st.prefix_query_tokens));
  metric("refit_prefix_cache_hits_total", "counter", "Tokens whose KV came from the prefix cache.",
         std::to_string(st.prefix_hit_tokens));
  metric(
      "refit_prefix_cache_hit_ratio", "gauge",
      "Prefix-cache hits over queries (tokens, since start).",
      fmt::format("{:.6f}", st.prefix_query_tokens ? static_cast<double>(st.prefix_hit_tokens) /
                                                         static_cast<double>(st.prefix_query_tokens)
                                                   : 0.0));
  metric("refit_prefix_cache_blocks", "gauge",
         "KV blocks held by the prefix cache (in use or evictable).",
         std::to_string(st.kv.cached_blocks));
  metric("refit_prefix_cache_evictions_total", "counter",
         "Cached KV blocks evicted for new content.", std::to_string(st.kv.evictions));
  metric("refit_prefix_cache_invalidations_total", "counter",
         "Prefix-cache flushes (weight updates, /flush_cache).",
         std::to_string(st.prefix_invalidations));
  metric("refit_prefix_cache_dropped_blocks_total", "counter",
         "Cached KV blocks dropped by invalidations.", std::to_string(st.prefix_blocks_dropped));
  metric("refit_steps_total", "counter", "Batched forward steps.", std::to_string(st.steps));
  metric("refit_preemptions_total", "counter", "Requests preempted for KV space.",
         std::to_string(st.preemptions));
  metric("refit_refits_total", "counter", "Weight updates committed.", std::to_string(st.refits));
  metric("refit_refit_failures_total", "counter", "Weight updates refused.",
         std::to_string(st.refit_failures));
  metric("refit_refit_duration_seconds_total", "counter", "Time spent applying weight updates.",
         fmt::format("{:.6f}", st.refit_seconds));
  metric("refit_weight_version", "gauge", "Current weight version number.",
         std::to_string(engine.weight_version()));
  metric("refit_paused", "gauge", "1 while generation is paused.", st.paused ? "1" : "0");
  metric("refit_tensor_parallel_size", "gauge", "Ranks the model is sharded over.",
         std::to_string(engine.world_size()));
  metric("refit_http_requests_total", "counter", "HTTP requests received.",
         std::to_string(http_requests.load()));
  metric("refit_http_errors_total", "counter", "HTTP requests answered with an error.",
         std::to_string(http_errors.load()));
  return out;
}

}  // namespace

void HttpServer::monitoring_routes() {
  httplib::Server& s = *http_;
  s.Get("/health", guarded([](const httplib::Request&, httplib::Response& res) {
          send_json(res, 200, json{{"status", "ok"}});
        }));
  s.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
          const SchedulerStats st = scheduler_->stats();
          res.set_content(prometheus_text(st, engine_, http_requests_, http_errors_),
                          "text/plain; version=0.0.4");
        }));
}

}  // namespace refit
