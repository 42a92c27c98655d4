// Rotary settings from a Hugging Face config.json: rope_theta with rope_scaling
// (transformers v4), or rope_parameters (v5: flat, or one dict per layer type), into the
// model-wide RopeScaling (and the sliding layers' rope where v5 gives them their own).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "models/model_config.h"

namespace refit {

// Reads theta and scaling into `c` (c.head_dim, c.rope_dim and c.max_seq_len already set;
// dynamic NTK extends c.max_seq_len, as vLLM does). Unknown keys inside the rope dict go
// to c.unrecognised_fields as "rope_scaling.<key>"; an unsupported rope type, or a
// per-layer-type dict on an architecture without per-layer rope (`per_layer_types` false)
// whose entries differ, throws FormatError naming `source` and the field.
// partial_rotary_factor, top-level (v4) or inside rope_parameters (v5); 1 when absent.
double hf_partial_rotary_factor(const nlohmann::json& config);

void read_hf_rope(const nlohmann::json& config, ModelConfig& c, const std::string& source,
                  bool per_layer_types);

}  // namespace refit
