// What a loaded model's files say about generation, read once for the Engine and for
// `refit inspect` (which shows exactly what the engine will use): the stop ids
// (runtime/stop_tokens.h) and the sampling defaults (runtime/generation_defaults.h).
#pragma once

#include <string>

#include "formats/checkpoint.h"
#include "models/model_config.h"
#include "runtime/generation_defaults.h"
#include "runtime/stop_tokens.h"
#include "tokenizer/tokenizer.h"

namespace refit {

struct GenerationSetup {
  StopTokenIds stop_ids;
  GenerationDefaults defaults;
};

// `checkpoint` null: the built-in demo model (its tokenizer's eos only). `mode` is
// EngineOptions::generation_config: "auto", "vllm" or a folder holding a
// generation_config.json (refused when it has none). `config` gives the fallback eos of
// formats that name none (llama2.c's 2). FormatError naming the file and field for a
// malformed eos_token_id or sampling value.
GenerationSetup read_generation_setup(const Checkpoint* checkpoint, const Tokenizer* tokenizer,
                                      const ModelConfig& config, const std::string& mode);

}  // namespace refit
