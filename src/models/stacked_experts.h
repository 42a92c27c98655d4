// The Hugging Face stacked forms of a model's per-expert tensors (gpt-oss's fused
// `mlp.experts.gate_up_proj` and friends, weights/checkpoint_alias.h), derived from its
// architecture's tensor table (TensorName::hf_stacked): for each layer and stacked tensor
// its shape and, per expert and slot, which view of it is that per-expert tensor. A float
// weight stacked [E, in, out] also has the MXFP4 pair `<name>_blocks` [E, out, in/32, 16]
// and `<name>_scales` [E, out, in/32] (rows = outputs, never transposed).
#pragma once

#include <vector>

#include "models/model_config.h"
#include "weights/checkpoint_alias.h"

namespace refit {

std::vector<CheckpointAlias> stacked_expert_aliases(const ModelConfig& config);

}  // namespace refit
