// `refit synth`: write a deterministic synthetic checkpoint (synthetic/synthetic_checkpoint.h)
// with the shapes of a common real model, for tests and benchmarks.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "cli/command.h"
#include "core/error.h"
#include "models/architecture.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"

namespace refit::cli {
namespace {

struct SynthArgs {
  std::string arch = "llama";
  std::string preset = "tiny";
  std::string dtype = "f32";
  std::string format = "gguf";
  std::string out;
  uint64_t seed = 0;
  double max_shard_gb = 5.0;
  int64_t layers = 0;
  int64_t context = 0;  // 0: the preset's (2048)
  bool mxfp4_experts = false;
  bool quiet = false;
};

int run_synth(const SynthArgs& a) {
  const Architecture arch = find_architecture(a.arch).id;
  ModelConfig config = synthetic_preset(arch, a.preset, a.layers);
  if (a.context > 0) config.max_seq_len = a.context;
  SyntheticCheckpointOptions o;
  static const std::map<std::string, DType> kDTypes = {
      {"f32", DType::f32}, {"f16", DType::f16}, {"bf16", DType::bf16}};
  if (a.dtype == "q8_0") {
    if (a.format != "gguf") fail("--dtype q8_0 needs --format gguf (safetensors has no Q8_0)");
    o.gguf_q8_0 = true;
  } else {
    o.weight_dtype = kDTypes.at(a.dtype);
  }
  o.mxfp4_experts = a.mxfp4_experts;
  o.seed = a.seed;
  o.name = fmt::format("synthetic-{}-{}-{}{}-s{}", a.arch, a.preset, a.dtype,
                       a.mxfp4_experts ? "-mxfp4-experts" : "", a.seed);
  o.max_shard_bytes = static_cast<uint64_t>(a.max_shard_gb * 1e9);
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double last_report = -1.0;
  if (!a.quiet && isatty(fileno(stderr))) {  // a progress line only on a terminal
    o.progress = [&](size_t done, size_t total, uint64_t bytes) {
      const double now = seconds();
      if (done != total && now - last_report < 0.1) return;
      last_report = now;
      fmt::print(stderr, "\rwriting {}: tensor {}/{}, {:.2f} GB, {:.1f} s", a.out, done, total,
                 bytes / 1e9, now);
      if (done == total) fmt::print(stderr, "\n");
    };
  }
  if (a.format == "hf")
    write_synthetic_hf(a.out, config, o);
  else
    write_synthetic_gguf(a.out, config, o);
  if (!a.quiet)
    fmt::print("{}: {} {} ({} parameters, {} weights, seed {}) as {} in {:.1f} s\n", a.out, a.arch,
               a.preset, config.n_params(), a.dtype, a.seed, a.format, seconds());
  return 0;
}

CommandRegistrar registrar{
    {"synth", "Write a deterministic synthetic checkpoint (HF folder or GGUF file)",
     [](CLI::App& sub) {
       auto args = std::make_shared<SynthArgs>();
       sub.add_option("--arch", args->arch, "Architecture")
           ->check(
               CLI::IsMember({"llama", "qwen2", "qwen3", "gemma3", "phi3", "qwen3moe", "gpt-oss"}))
           ->capture_default_str();
       sub.add_option("--preset", args->preset,
                      "tiny (dim 288, 6 layers), small (dim 768, 12 layers), medium (dim 2048, 22 "
                      "layers, GQA); gpt-oss also 20b (gpt-oss-20b's shapes)")
           ->check(CLI::IsMember({"tiny", "small", "medium", "20b"}))
           ->capture_default_str();
       sub.add_option(
              "--dtype", args->dtype,
              "Matmul weight and embedding dtype (norms and biases are f32); q8_0: GGUF only")
           ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}))
           ->capture_default_str();
       sub.add_option("--format", args->format, "hf: a folder with safetensors; gguf: one file")
           ->check(CLI::IsMember({"hf", "gguf"}))
           ->capture_default_str();
       sub.add_option("-o,--output", args->out, "Output folder (hf) or file (gguf)")->required();
       sub.add_option("--seed", args->seed, "Weight seed")->capture_default_str();
       sub.add_option("--max-shard-gb", args->max_shard_gb, "hf: largest safetensors shard, in GB")
           ->check(CLI::PositiveNumber)
           ->capture_default_str();
       sub.add_option("--layers", args->layers,
                      "Layer count replacing the preset's (a real model's shapes, fewer layers)")
           ->check(CLI::PositiveNumber);
       sub.add_option("--context", args->context,
                      "Context length the checkpoint declares (default 2048), e.g. 8192 for "
                      "long-context benchmarks (bench -d)")
           ->check(CLI::PositiveNumber);
       sub.add_flag("--mxfp4-experts", args->mxfp4_experts,
                    "gpt-oss: experts in MXFP4 (GGUF block_mxfp4; HF _blocks/_scales), quantized "
                    "from the f32 values as llama-quantize does");
       sub.add_flag("-q,--quiet", args->quiet, "No progress or summary");
       return std::function<int()>([args] { return run_synth(*args); });
     }}};

}  // namespace
}  // namespace refit::cli
