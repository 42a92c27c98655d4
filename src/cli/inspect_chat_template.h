// The "chat template" section of `refit inspect`: which template a chat request would be
// rendered with (its source, its named variants, the special tokens it is given), or why
// it cannot be used.
#pragma once

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"

namespace refit::cli {

nlohmann::ordered_json chat_template_section_json(const Checkpoint& checkpoint);
void print_chat_template_section(const Checkpoint& checkpoint);

}  // namespace refit::cli
