// The options every command that loads a model shares (`generate`, `serve`): which
// checkpoint, how to split, quantize and lay out its weights, and how many threads —
// declared once so the commands spell, document and validate them alike.
#pragma once

#include <string>

#include "runtime/engine.h"

namespace CLI {
class App;
}

namespace refit::cli {

struct EngineArgs {
  std::string model, tokenizer, quant, layout;
  int threads = 0;
  int tp = 1;
  bool ep = false;
  int64_t max_model_len = 0;
  std::string generation_config = "auto";
};

// -m/--model, --tokenizer, -t/--threads, --tp, --quant, --layout, -c/--max-model-len,
// --generation-config.
void add_engine_args(CLI::App& sub, EngineArgs& args);

// EngineOptions for `args`; under --tp N the MPI communicator of the `mpirun -np N`
// launch, or an error telling how to launch `refit <command>` that way.
EngineOptions engine_options(const EngineArgs& args, const std::string& command);

}  // namespace refit::cli
