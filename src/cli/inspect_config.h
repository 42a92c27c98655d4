// The "config" section of `refit inspect`: what refit applies from the checkpoint's
// configuration (rope and its scaling, windows per layer, biases, activation ...), and the
// config.json fields it did not recognise and ignores; or why it refuses the config.
#pragma once

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"

namespace refit::cli {

nlohmann::ordered_json config_section_json(const Checkpoint& checkpoint);
void print_config_section(const Checkpoint& checkpoint);

}  // namespace refit::cli
