// What the CLI commands share for getting a model: open a checkpoint path (or build the
// built-in demo model when none is given), with a progress bar for large files, and its
// tokenizer when the format carries one.
#pragma once

#include <memory>
#include <string>

#include "formats/checkpoint.h"
#include "models/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace refit::cli {

struct LoadedModel {
  std::unique_ptr<Checkpoint> checkpoint;  // null for the demo model
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the format has none and none was given
  std::string description;               // path, or "built-in demo model"
  size_t file_bytes = 0;
};

LoadedModel load_model_for_cli(const std::string& path, const std::string& tokenizer_path,
                               bool show_progress);

}  // namespace refit::cli
