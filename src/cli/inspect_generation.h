// `refit inspect`'s generation section: the stop ids and the sampling defaults an Engine
// loading this checkpoint would use (read by the same function the Engine calls,
// runtime/generation_setup.h), with the file each comes from.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "formats/checkpoint.h"

namespace refit::cli {

// `mode`: --generation-config (auto, vllm or a folder). A malformed file is reported in the
// section ("error"), not thrown: inspect shows what it can.
nlohmann::ordered_json generation_json(const Checkpoint& checkpoint, const std::string& mode);
void print_generation(const Checkpoint& checkpoint, const std::string& mode);

}  // namespace refit::cli
