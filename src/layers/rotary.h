// Rotary position embedding tables. The kernel reads a precomputed [max_pos, rot_dim]
// table (cos of every frequency, then sin), so scaling schemes only change the table.
#pragma once

#include "core/tensor.h"
#include "models/model_config.h"

namespace refit {

// Frequencies theta^(-2i/rot_dim), with Llama-3 scaling and GGUF freq factors applied.
std::vector<double> rope_frequencies(const ModelConfig& config);
Tensor rope_cos_sin_table(const ModelConfig& config, int64_t max_positions);

}  // namespace refit
