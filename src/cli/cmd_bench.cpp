// `refit bench`: prompt-processing and generation speed as llama.cpp's llama-bench measures
// and prints it (benchmarks/token_bench.h, benchmarks/bench_report.h), beside a STREAM-style
// bandwidth measured in the same run (decode cannot beat bandwidth / weight bytes). With
// --refit: weight-update throughput from disk and from memory beside memcpy
// (benchmarks/refit_bench.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks/bench_report.h"
#include "benchmarks/memory_bandwidth.h"
#include "benchmarks/refit_bench.h"
#include "benchmarks/token_bench.h"
#include "cli/command.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "runtime/engine.h"

namespace refit::cli {
namespace {

struct BenchArgs {
  std::string model;
  int n_prompt = 512;
  int n_gen = 128;
  std::vector<std::string> pg;  // llama-bench's -pg PP,TG: a prompt, then TG tokens, timed together
  std::vector<int> depths{0};   // llama-bench's -d: every test again after each depth
  int threads = 0;
  std::string quant;  // EngineOptions::quant: quantize weights at load
  std::string
      layout;  // EngineOptions::layout: auto, plain, transpose, shuffle16x16, interleave4x16
  int reps = 5;
  std::string output = "md";
  bool no_bandwidth = false;
  bool refit = false;
  std::string refit_from;
  bool no_check_finite = false;
  uint32_t seed = 0;
  bool progress = false;
};

// Bytes of a file or of a folder's files: the progress bar only shows for large models.
size_t path_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return static_cast<size_t>(fs::file_size(path, ec));
  size_t total = 0;
  if (fs::is_directory(path, ec))
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) total += static_cast<size_t>(e.file_size(ec));
  return total;
}

// -pg values as llama-bench takes them: "PP,TG", both positive (one test per value).
std::vector<std::pair<int, int>> parse_pg(const std::vector<std::string>& values) {
  std::vector<std::pair<int, int>> out;
  for (const std::string& v : values) {
    int pp = 0, tg = 0;
    char tail = 0;
    if (std::sscanf(v.c_str(), "%d,%d%c", &pp, &tg, &tail) != 2 || pp < 1 || tg < 1)
      fail("bench: -pg '{}' is not PP,TG (two positive token counts, e.g. -pg 512,128)", v);
    out.emplace_back(pp, tg);
  }
  return out;
}

void note(const BenchArgs& a, const std::string& what) {
  if (a.progress) fmt::print(stderr, "refit bench: {}\n", what);
}

int run_token_benchmarks(const BenchArgs& a, const std::vector<std::pair<int, int>>& pg,
                         Engine& engine) {
  const BenchModelInfo info =
      bench_model_info(engine.model(), a.model.empty() ? "(built-in demo)" : a.model);
  // Every planned test is checked first: a depth past the context fails before any output.
  for (int depth : a.depths) {
    if (a.n_prompt > 0) check_token_bench(engine.model(), a.n_prompt, 0, a.reps, depth);
    if (a.n_gen > 0) check_token_bench(engine.model(), 0, a.n_gen, a.reps, depth);
    for (const auto& [pp, tg] : pg) check_token_bench(engine.model(), pp, tg, a.reps, depth);
  }
  const bool md = a.output == "md";
  if (md) fmt::print("{}", token_bench_markdown_header());
  std::fflush(stdout);

  // Bandwidth before and after the tests, best of each kept (STREAM reports best rates): on a
  // shared machine one short window can land on a busy moment.
  std::optional<StreamResult> stream;
  const std::vector<ByteRegion> weights = decode_read_regions(engine.model());
  auto measure_bandwidth = [&] {
    if (a.no_bandwidth) return;
    note(a, "STREAM-style bandwidth");
    StreamResult s = measure_stream();
    note(a, "read-only pass over the weights");
    s.weights_read_gbs = measure_read_gbs(weights, s.reps);
    if (!stream) {
      stream = s;
    } else {
      stream->copy_gbs = std::max(stream->copy_gbs, s.copy_gbs);
      stream->read_gbs = std::max(stream->read_gbs, s.read_gbs);
      stream->weights_read_gbs = std::max(stream->weights_read_gbs, s.weights_read_gbs);
      stream->reps += s.reps;
    }
  };
  measure_bandwidth();

  std::vector<TokenBenchResult> results;
  // A decode test also reads the weights once before each run and after the last, so that
  // each run has a read rate taken at its own moment (TokenBenchResult::read_gbs_beside).
  auto read_pass = [&] { return measure_read_gbs(weights, 1); };
  auto run = [&](int n_prompt, int n_gen, int depth) {
    note(a, fmt::format("{}{} x {} (+1 warm-up)",
                        n_prompt > 0 ? fmt::format("pp{}", n_prompt) : fmt::format("tg{}", n_gen),
                        depth > 0 ? fmt::format(" @ d{}", depth) : std::string(), a.reps));
    const bool decode = n_prompt == 0 && depth == 0 && !a.no_bandwidth;
    results.push_back(run_token_bench(engine.model(), n_prompt, n_gen, a.reps, a.seed, depth,
                                      decode ? std::function<double()>(read_pass) : nullptr));
    if (md) fmt::print("{}", token_bench_markdown_row(results.back(), info));
    std::fflush(stdout);
  };
  for (int depth : a.depths) {
    if (a.n_prompt > 0) run(a.n_prompt, 0, depth);
    if (a.n_gen > 0) run(0, a.n_gen, depth);
    for (const auto& [pp, tg] : pg) run(pp, tg, depth);
  }

  measure_bandwidth();
  if (md) {
    if (stream) fmt::print("{}", bandwidth_markdown(*stream, info, results));
    fmt::print("\nbuild: refit (CPU, {} kernels)\n", cpu::cpu_isa_name());
  } else {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const TokenBenchResult& r : results) out.push_back(token_bench_json(r, info, stream));
    fmt::print("{}\n", out.dump(2));
  }
  return 0;
}

int run_bench(const BenchArgs& a) {
  if (a.reps < 1) fail("bench: -r must be at least 1 (got {})", a.reps);
  if (a.n_prompt < 0 || a.n_gen < 0) fail("bench: -p and -n must not be negative");
  if (a.depths.empty()) fail("bench: -d needs at least one depth (0: an empty cache)");
  for (int d : a.depths)
    if (d < 0) fail("bench: -d {} is negative (depths are tokens already in the cache)", d);
  const auto pg = parse_pg(a.pg);  // malformed values fail before the model loads
  if (!a.refit && a.n_prompt == 0 && a.n_gen == 0 && pg.empty())
    fail("bench: nothing to run (-p 0 and -n 0, no -pg)");
  if (a.refit && a.model.empty() && a.refit_from.empty())
    fail("bench --refit needs -m PATH (the checkpoint whose weights are pushed into the engine)");

  EngineOptions options;
  options.model_path = a.model;
  options.threads = a.threads;
  options.quant = a.quant;
  options.layout = a.layout;
  if (!a.model.empty()) options.progress = progress_bar("loading " + a.model, path_bytes(a.model));
  note(a, a.model.empty() ? "built-in demo model" : "loading " + a.model);
  Engine engine(options);

  if (!a.refit) return run_token_benchmarks(a, pg, engine);

  const std::string source = a.refit_from.empty() ? a.model : a.refit_from;
  note(a, "refit from " + source);
  UpdateOptions update_options;
  update_options.check_finite = !a.no_check_finite;
  const RefitBenchResult r = run_refit_bench(engine, source, a.reps, update_options);
  if (a.output == "md")
    fmt::print("{}", refit_bench_markdown(r));
  else
    fmt::print("{}\n", refit_bench_json(r).dump(2));
  return 0;
}

CommandRegistrar registrar{
    {"bench",
     "Prompt and generation speed as llama-bench measures it (or refit throughput with --refit)",
     [](CLI::App& sub) {
       auto args = std::make_shared<BenchArgs>();
       sub.add_option("-m,--model", args->model,
                      "Model (GGUF, HF folder, llama2.c .bin); none: built-in demo");
       sub.add_option("-p,--n-prompt", args->n_prompt,
                      "Prompt tokens (pp test, one batch); 0 skips it")
           ->capture_default_str();
       sub.add_option("-n,--n-gen", args->n_gen,
                      "Generated tokens (tg test, one at a time); 0 skips it")
           ->capture_default_str();
       sub.add_option(
           "--pg", args->pg,
           "Prompt then generation, timed together as llama-bench's -pg: PP,TG (repeatable)");
       sub.add_option("-d,--n-depth", args->depths,
                      "Tokens already in the cache when each test starts, as llama-bench's -d "
                      "(filled once, untimed; a comma list runs every test at each depth)")
           ->delimiter(',')
           ->capture_default_str();
       sub.add_option("-t,--threads", args->threads, "Threads (default: all cores)");
       sub.add_option(
           "--quant", args->quant,
           "Quantize weights at load: fp8 (per tensor), fp8-channel, fp8-block, mxfp4, q8_0; -w8a8 "
           "also quantizes activations (int8 blocks for mxfp4/q8_0: faster, ~1e-2 error). On a "
           "Q8_0/MXFP4 GGUF, q8_0-w8a8/mxfp4-w8a8 keep the file's codes");
       sub.add_option("--layout", args->layout,
                      "Weight layout transform: auto (default: the fastest kernel's layout per "
                      "weight), plain, transpose, shuffle16x16, interleave4x16");
       sub.add_option("-r,--repetitions", args->reps, "Timed repetitions per test")
           ->capture_default_str();
       sub.add_option("-o,--output", args->output, "Output format")
           ->check(CLI::IsMember({"md", "json"}))
           ->capture_default_str();
       sub.add_flag("--no-bandwidth", args->no_bandwidth,
                    "Skip the bandwidth measurements (STREAM-style, and the read passes over "
                    "the weights around the tests and beside each decode run)");
       sub.add_flag(
           "--refit", args->refit,
           "Measure weight-update throughput (disk and in-memory) beside memcpy instead of pp/tg");
       sub.add_option("--refit-from", args->refit_from,
                      "--refit: checkpoint to update from (default: -m)");
       sub.add_flag("--no-check-finite", args->no_check_finite,
                    "--refit: updates skip the NaN/inf scan (on by default)");
       sub.add_option("--seed", args->seed, "Seed of the random prompt tokens")
           ->capture_default_str();
       sub.add_flag("--progress", args->progress, "Progress lines on stderr");
       return std::function<int()>([args] { return run_bench(*args); });
     }}};

}  // namespace
}  // namespace refit::cli
