// `refit serve`: an OpenAI-compatible HTTP server with SGLang's RL weight-update
// endpoints over one model (server/http_server.h). Ctrl-C (SIGINT/SIGTERM) stops it.
// `mpirun -np N refit serve --tp N`: tensor-parallel serving (parallel/rank_group.h).
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <thread>

#include "cli/command.h"
#include "cli/engine_args.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "kernels/cpu/serve_kernels.h"
#include "parallel/rank_group.h"
#include "runtime/engine.h"
#include "server/http_server.h"

namespace refit::cli {
namespace {

struct ServeOptions {
  EngineArgs engine;
  std::string host = "127.0.0.1", served_name, chat_template;
  int port = 8000, http_threads = 1024;
  double request_read_timeout = 30, keep_alive_timeout = 5;
  int64_t kv_blocks = 0, max_running = 64, max_step_tokens = 256, max_waiting = 4096,
          block_size = 16;
  double queue_timeout = 120;
  bool no_prefix_cache = false;
  bool no_check_finite = false;
  bool return_routed_experts = false;
  std::string reasoning_parser = "auto";  // harmony (gpt-oss) output parsing on chat completions
  std::string logprobs_mode;  // empty: raw_logprobs on the OpenAI routes, SGLang's own on /generate
  int max_logprobs = -1;
  double shutdown_timeout = 30;  // seconds requests in flight may finish after SIGTERM
  AccessOptions access;          // keys, allowed hosts/origins, --weights-root
  size_t max_request_bytes = 0, max_readback_bytes = 0;  // 0: the defaults
};

// SIGINT/SIGTERM: the handler only counts (async-signal-safe); a watcher thread shuts the
// server down gracefully on the first; a second exits at once.
std::atomic<int> g_signals{0};

extern "C" void on_signal(int) {
  if (g_signals.fetch_add(1) >= 1) _exit(130);
}

// Runs `server.shutdown` once a signal came; returns when that is done or `done` is set.
class ShutdownWatcher {
 public:
  ShutdownWatcher(HttpServer& server, std::chrono::milliseconds drain)
      : thread_([this, &server, drain] {
          while (!done_.load()) {
            if (g_signals.load() > 0) {
              server.shutdown(drain);
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
  }
  ~ShutdownWatcher() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// docs/security.md: who may call which route, and what a request may make the server open.
void add_access_options(CLI::App& sub, AccessOptions& a) {
  sub.add_option("--api-key", a.api_key,
                 "Key every route but /health, /health_generate and /metrics needs, as "
                 "'Authorization: Bearer KEY' (also from REFIT_API_KEY, which ps does not show)")
      ->envname("REFIT_API_KEY");
  sub.add_option("--admin-api-key", a.admin_api_key,
                 "Key the weight, pause, memory, sleep and cache routes need instead of "
                 "--api-key (also from REFIT_ADMIN_API_KEY)")
      ->envname("REFIT_ADMIN_API_KEY");
  sub.add_option("--allowed-hosts", a.allowed_hosts,
                 "Host header names accepted besides loopback, comma separated ('*': any); a "
                 "server on a loopback address takes no others (DNS rebinding)")
      ->delimiter(',');
  sub.add_option("--allowed-origins", a.allowed_origins,
                 "Browser origins (scheme://host[:port]) that may send requests that change "
                 "things, besides loopback ones; comma separated ('*': any)")
      ->delimiter(',');
  sub.add_option("--weights-root", a.weights_root,
                 "The folder update_weights_from_disk and /update_weights may load from "
                 "(symlinks resolved; relative paths start there); default: any path")
      ->check(CLI::ExistingDirectory);
}

ServerOptions server_options(const ServeOptions& o) {
  ServerOptions s;
  s.host = o.host;
  s.port = o.port;
  s.model_name = o.served_name;
  s.chat_template = o.chat_template;
  s.reasoning_parser = o.reasoning_parser;
  s.connections.max_connections = o.http_threads;
  s.connections.request_read_seconds = o.request_read_timeout;
  s.connections.keep_alive_seconds = o.keep_alive_timeout;
  s.scheduler.kv_blocks = o.kv_blocks;
  s.scheduler.block_size = o.block_size;
  s.scheduler.max_running = o.max_running;
  s.scheduler.max_step_tokens = o.max_step_tokens;
  s.scheduler.max_waiting = o.max_waiting;
  s.scheduler.queue_timeout_seconds = o.queue_timeout;
  s.scheduler.prefix_cache = !o.no_prefix_cache;
  s.check_finite = !o.no_check_finite;
  s.return_routed_experts = o.return_routed_experts;
  if (!o.logprobs_mode.empty()) {
    s.logprobs_mode = logprob_mode_from_name(o.logprobs_mode);
    s.logprobs_mode_explicit = true;
  }
  s.max_logprobs = o.max_logprobs;
  s.access = o.access;
  s.max_request_bytes = o.max_request_bytes;
  s.max_readback_bytes = o.max_readback_bytes;
  return s;
}

void announce(const ServeOptions& o, const Engine& engine, const HttpServer& server) {
  const int port = server.port();
  // The first line names the port (tests start the server with --port 0 and read it) and
  // the pid that SIGTERM stops (under mpirun: rank 0's, which then stops every rank).
  fmt::print(
      "refit serve: listening on http://{}:{} ({}; tp {}; batch-invariant f32 matmul {}; pid {})\n",
      o.host, port, engine.description(), engine.world_size(),
      batch_invariant_f32_matmul() ? "on" : "off", getpid());
  // What stops generation and what a request that leaves sampling fields unset gets.
  fmt::print("refit serve: stop token ids {}; generation defaults {}\n", engine.stop_ids().str(),
             engine.generation_defaults().str());
  for (const std::string& note : engine.generation_defaults().notes)
    fmt::print("refit serve: generation_config: {}\n", note);
  std::fflush(stdout);
  if (const std::string warning = server.access_warning(); !warning.empty())
    std::fprintf(stderr, "%s\n", warning.c_str());
}

// Tensor parallel: rank 0 serves HTTP on a second thread while its main thread (the one
// MPI may be called from) runs every rank's collectives; the other ranks follow it.
int run_tensor_parallel(const ServeOptions& o, Engine& engine,
                        std::shared_ptr<Communicator> communicator) {
  RankGroup group(engine, std::move(communicator));
  if (!group.lead()) {
    // Signals (mpirun forwards SIGTERM to every rank) are the lead's to act on: it tells
    // the workers to exit once it has stopped.
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    group.run_worker();
    return 0;
  }
  HttpServer server(engine, server_options(o),
                    &group);  // the group's destructor frees the workers on error
  server.bind();
  ShutdownWatcher watcher(
      server, std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout * 1000)));
  announce(o, engine, server);
  std::exception_ptr error;
  std::thread http([&] {
    try {
      server.serve();
      server.stop_scheduler();  // its last step needs the main thread, still serving below
    } catch (...) {
      error = std::current_exception();
    }
    group.stop();
  });
  group.run_lead();  // returns after stop(), having told the workers to exit
  http.join();
  if (error) std::rethrow_exception(error);
  return 0;
}

int run(const ServeOptions& o) {
  raise_open_file_limit();  // each connection is a file
  const EngineOptions e = engine_options(o.engine, "serve");
  Engine engine(e);
  if (o.engine.tp > 1) return run_tensor_parallel(o, engine, e.communicator);
  HttpServer server(engine, server_options(o));
  server.bind();
  ShutdownWatcher watcher(
      server, std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout * 1000)));
  announce(o, engine, server);
  server.serve();
  return 0;
}

CommandRegistrar registrar{
    {"serve", "OpenAI-compatible HTTP server with RL weight-update endpoints", [](CLI::App& sub) {
       auto o = std::make_shared<ServeOptions>();
       add_engine_args(sub, o->engine);
       sub.add_option("--host", o->host, "Address to listen on")->default_val("127.0.0.1");
       sub.add_option("--port", o->port, "Port (0: any free port)")->default_val(8000);
       sub.add_option("--served-model-name", o->served_name,
                      "Model name reported and accepted in requests");
       sub.add_option("--chat-template", o->chat_template,
                      "Chat template to use instead of the model's: a Jinja file, or the "
                      "template text itself");
       sub.add_option("--http-threads", o->http_threads,
                      "Most open HTTP connections, a thread each (started as they come); one "
                      "more is answered 503")
           ->default_val(1024)
           ->check(CLI::Range(1, 1 << 16));
       sub.add_option("--request-read-timeout", o->request_read_timeout,
                      "Seconds a client has to send a request's headers, and as long again "
                      "plus 1 s per MiB for its body, before it is answered 408 and closed")
           ->default_val(30)
           ->check(CLI::PositiveNumber);
       sub.add_option("--keep-alive-timeout", o->keep_alive_timeout,
                      "Seconds an idle connection waits for its next request")
           ->default_val(5)
           ->check(CLI::PositiveNumber);
       sub.add_option("--kv-blocks", o->kv_blocks, "KV-cache blocks (0: auto)")->default_val(0);
       sub.add_option("--block-size", o->block_size, "Tokens per KV-cache block")->default_val(16);
       sub.add_option("--max-running", o->max_running, "Requests per batch")->default_val(64);
       sub.add_option("--max-step-tokens", o->max_step_tokens,
                      "New tokens per step (prefill chunk budget)")
           ->default_val(256);
       sub.add_option("--max-waiting", o->max_waiting, "Queued requests before 503")
           ->default_val(4096);
       sub.add_option("--queue-timeout", o->queue_timeout,
                      "Seconds a request may wait for KV space before 503")
           ->default_val(120);
       sub.add_flag("--no-prefix-cache", o->no_prefix_cache,
                    "Do not share KV blocks between requests with a common prefix");
       sub.add_flag("--no-check-finite", o->no_check_finite,
                    "Weight updates skip the NaN/inf scan unless a request sends "
                    "\"check_finite\": true");
       sub.add_flag("--enable-return-routed-experts", o->return_routed_experts,
                    "Mixture of experts: every OpenAI choice carries routed_experts (base64 int32 "
                    "[positions, moe layers, k]); /generate returns them when asked either way");
       sub.add_option("--reasoning-parser", o->reasoning_parser,
                      "Chat completions of a harmony model (gpt-oss): auto (when the vocabulary "
                      "has the harmony tokens), gpt-oss (vLLM's openai_gptoss), none (raw text)")
           ->default_val("auto")
           ->check(CLI::IsMember({"auto", "gpt-oss", "openai_gptoss", "none"}));
       sub.add_option(
              "--logprobs-mode", o->logprobs_mode,
              "What logprobs report (vLLM's values): raw_logprobs, processed_logprobs, raw_logits, "
              "processed_logits; "
              "also sglang. Default: raw_logprobs on /v1/*, SGLang's semantics on /generate")
           ->check(CLI::IsMember(
               {"raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits", "sglang"}));
       sub.add_option("--max-logprobs", o->max_logprobs,
                      "Most top logprobs a request may ask for (-1: the whole vocabulary)")
           ->default_val(-1)
           ->check(CLI::Range(-1, INT_MAX));
       sub.add_option("--shutdown-timeout", o->shutdown_timeout,
                      "Seconds requests in flight may finish after SIGTERM before they end with "
                      "'abort' (a second signal exits "
                      "at once)")
           ->default_val(30)
           ->check(CLI::NonNegativeNumber);
       add_access_options(sub, o->access);
       sub.add_option("--max-request-bytes", o->max_request_bytes,
                      "Largest request body of every route (0: per route: generation routes from "
                      "the context, /update_weights_from_tensor from the model's size, others 1 "
                      "MiB)")
           ->default_val(0);
       sub.add_option("--max-readback-bytes", o->max_readback_bytes,
                      "Most f32 bytes one /get_weights_by_name may return (0: 256 MiB or the "
                      "largest parameter, whichever is more)")
           ->default_val(0);
       return std::function<int()>([o] { return run(*o); });
     }}};

}  // namespace
}  // namespace refit::cli
