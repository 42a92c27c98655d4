#include "cli/engine_args.h"

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "dist/communicator.h"

namespace refit::cli {

void add_engine_args(CLI::App& sub, EngineArgs& a) {
  sub.add_option("-m,--model", a.model,
                 "GGUF file, Hugging Face folder or llama2.c .bin (default: built-in demo model)");
  sub.add_option("--tokenizer", a.tokenizer,
                 "Tokenizer file for formats that carry none (llama2.c)");
  sub.add_option("-t,--threads", a.threads, "Compute threads (default: all cores)");
  sub.add_option("-c,--ctx-size,--max-model-len", a.max_model_len,
                 "Context length to serve (default: the checkpoint's; at most that)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--tp", a.tp, "Tensor-parallel size (run under mpirun -np N)")
      ->check(CLI::PositiveNumber);
  sub.add_flag("--ep,--enable-expert-parallel", a.ep,
               "Mixture-of-experts layers shard by expert over the --tp ranks (each rank whole "
               "experts) instead of along every expert's width");
  sub.add_option("--quant", a.quant,
                 "Quantize weights at load: fp8 (per tensor), fp8-channel, fp8-block, mxfp4, q8_0; "
                 "-w8a8 also quantizes activations (int8 blocks for mxfp4/q8_0: faster, ~1e-2 "
                 "error). On a Q8_0/MXFP4 GGUF, q8_0-w8a8/mxfp4-w8a8 keep the file's codes");
  sub.add_option("--layout", a.layout,
                 "Weight layout transform: auto (default: the fastest kernel's layout per weight), "
                 "plain, transpose, shuffle16x16, interleave4x16");
  sub.add_option("--generation-config", a.generation_config,
                 "Sampling defaults for fields a request leaves unset, as vLLM's flag: auto (the "
                 "model folder's generation_config.json), vllm (ignore it: engine defaults) or a "
                 "FOLDER holding a generation_config.json");
}

EngineOptions engine_options(const EngineArgs& a, const std::string& command) {
  EngineOptions e;
  e.model_path = a.model;
  e.tokenizer_path = a.tokenizer;
  e.threads = a.threads;
  e.tp = a.tp;
  e.expert_parallel = a.ep;
  e.quant = a.quant;
  e.max_model_len = a.max_model_len;
  e.layout = a.layout;
  e.generation_config = a.generation_config;
  if (a.tp > 1) {
    e.communicator = mpi_communicator_if_launched();
    if (!e.communicator)
      fail("--tp {} runs one process per rank: start it as `mpirun -np {} refit {} --tp {} ...`{}",
           a.tp, a.tp, command, a.tp,
           built_with_mpi() ? ""
                            : " (and this build has no MPI: install libopenmpi-dev and rebuild)");
  }
  return e;
}

}  // namespace refit::cli
