// The shape of a mixture-of-experts model's routing, as routing replay sends and takes it
// (SGLang's return_routed_experts, vLLM's routed_experts): per position, for each MoE layer
// in order, the k experts the token went to: [positions, moe layers, k].
#pragma once

#include <cstdint>

#include "models/model_config.h"

namespace refit {

int64_t moe_layer_count(const ModelConfig& config);
// moe layers x k: the ids per position (0 for a dense model).
int64_t moe_routing_width(const ModelConfig& config);

}  // namespace refit
