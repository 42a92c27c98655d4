// `refit serve`: an OpenAI-compatible HTTP server with SGLang's RL weight-update
// endpoints over one model (server/http_server.h). Ctrl-C (SIGINT/SIGTERM) stops it.
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <thread>

#include "cli/command.h"
#include "core/error.h"
#include "kernels/cpu/serve_kernels.h"
#include "runtime/engine.h"
#include "server/http_server.h"

namespace refit::cli {
namespace {

struct ServeOptions {
  std::string model, tokenizer, host = "127.0.0.1", quant, layout, served_name;
  int port = 8000, tp = 1, threads = 0, http_threads = 128;
  int64_t kv_blocks = 0, max_running = 64, max_step_tokens = 256, max_waiting = 4096, block_size = 16;
  double queue_timeout = 120;
  bool no_prefix_cache = false;
};

HttpServer* g_server = nullptr;

extern "C" void on_signal(int) {
  if (g_server) g_server->stop();
}

int run(const ServeOptions& o) {
  EngineOptions e;
  e.model_path = o.model;
  e.tokenizer_path = o.tokenizer;
  e.tp = o.tp;
  e.quant = o.quant;
  e.layout = o.layout;
  e.threads = o.threads;
  if (o.tp > 1) fail("refit serve runs one process; --tp {} (tensor-parallel serving) is not supported yet", o.tp);
  Engine engine(e);
  ServerOptions s;
  s.host = o.host;
  s.port = o.port;
  s.model_name = o.served_name;
  s.http_threads = o.http_threads;
  s.scheduler.kv_blocks = o.kv_blocks;
  s.scheduler.block_size = o.block_size;
  s.scheduler.max_running = o.max_running;
  s.scheduler.max_step_tokens = o.max_step_tokens;
  s.scheduler.max_waiting = o.max_waiting;
  s.scheduler.queue_timeout_seconds = o.queue_timeout;
  s.scheduler.prefix_cache = !o.no_prefix_cache;
  HttpServer server(engine, s);
  server.bind();
  g_server = &server;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // The first line names the port (tests start the server with --port 0 and read it).
  fmt::print("refit serve: listening on http://{}:{} ({}; batch-invariant f32 matmul {})\n", o.host, server.port(),
             engine.description(), batch_invariant_f32_matmul() ? "on" : "off");
  std::fflush(stdout);
  server.serve();
  g_server = nullptr;
  return 0;
}

CommandRegistrar registrar{{"serve", "OpenAI-compatible HTTP server with RL weight-update endpoints",
                            [](CLI::App& sub) {
  auto o = std::make_shared<ServeOptions>();
  sub.add_option("-m,--model", o->model, "GGUF file, Hugging Face folder or llama2.c .bin (default: built-in demo model)");
  sub.add_option("--tokenizer", o->tokenizer, "Tokenizer file for formats that carry none (llama2.c)");
  sub.add_option("--host", o->host, "Address to listen on")->default_val("127.0.0.1");
  sub.add_option("--port", o->port, "Port (0: any free port)")->default_val(8000);
  sub.add_option("--tp", o->tp, "Tensor-parallel size")->default_val(1);
  sub.add_option("--quant", o->quant, "Quantize weights at load (when available)");
  sub.add_option("--layout", o->layout, "Weight layout: plain, transpose, shuffle16x16");
  sub.add_option("-t,--threads", o->threads, "Compute threads (default: all cores)");
  sub.add_option("--served-model-name", o->served_name, "Model name reported and accepted in requests");
  sub.add_option("--http-threads", o->http_threads, "Concurrent HTTP connections")->default_val(128);
  sub.add_option("--kv-blocks", o->kv_blocks, "KV-cache blocks (0: auto)")->default_val(0);
  sub.add_option("--block-size", o->block_size, "Tokens per KV-cache block")->default_val(16);
  sub.add_option("--max-running", o->max_running, "Requests per batch")->default_val(64);
  sub.add_option("--max-step-tokens", o->max_step_tokens, "New tokens per step (prefill chunk budget)")->default_val(256);
  sub.add_option("--max-waiting", o->max_waiting, "Queued requests before 503")->default_val(4096);
  sub.add_option("--queue-timeout", o->queue_timeout, "Seconds a request may wait for KV space before 503")->default_val(120);
  sub.add_flag("--no-prefix-cache", o->no_prefix_cache, "Do not share KV blocks between requests with a common prefix");
  return std::function<int()>([o] { return run(*o); });
}}};

}  // namespace
}  // namespace refit::cli
