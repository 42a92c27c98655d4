// Every top-level field of a Hugging Face config.json is honoured, known harmless, refused
// by name, or reported: never silently ignored (a silently ignored field is a wrong answer
// served with confidence). The treatment of each field is data, in three tables in
// config_fields.cpp, plus each architecture's own honoured fields (ArchitectureDef::hf_fields):
//
//   honoured   read into ModelConfig (common fields, or the architecture's)
//   harmless   no effect on the logits (training-only, bookkeeping, generation defaults,
//              or handled by another part of refit: special token ids, quantization_config)
//   refused    changes the maths and refit does not run it: a FormatError naming the file
//              and the field, unless the field holds its neutral value (null, false, 1 ...)
//
// A field in none of them is "not recognised, ignored": kept in
// ModelConfig::unrecognised_fields, warned about at load and listed by `refit inspect`.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "models/model_config.h"

namespace refit {

struct ArchitectureDef;

// Throws FormatError (naming `source` and the field) for a refused field that is not
// neutral; returns the fields in no table, in the file's order.
std::vector<std::string> check_hf_config_fields(const nlohmann::json& config,
                                                const ArchitectureDef& arch,
                                                const std::string& source);

// Whether `arch` honours `field` itself (its hf_fields).
bool architecture_honours(const ArchitectureDef& arch, const std::string& field);

// What refit applies from a config, one setting per line in words ("rope: yarn factor 4
// (original 32768, attention factor 1.139)", "sliding window 4096 on layers 0-27", ...):
// derived from the ModelConfig, so it says what the forward pass does.
std::vector<std::string> describe_config(const ModelConfig& c);

// The load-time warning for c.unrecognised_fields ("" when there are none).
std::string unrecognised_fields_warning(const ModelConfig& c, const std::string& source);

}  // namespace refit
