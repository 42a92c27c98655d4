// Per-layer sliding windows from a Hugging Face config, as transformers builds layer_types:
// an explicit `layer_types` list ("sliding_attention" / "full_attention") wins; without
// it Mistral slides on every layer and Qwen2/Qwen3 on the layers from max_window_layers on
// (default 28), and only when use_sliding_window is true. A null sliding_window means no
// window anywhere (transformers then runs every layer as full attention).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "models/model_config.h"

namespace refit {

enum class WindowRule : uint8_t {
  every_layer,             // Mistral: sliding_window applies to all layers
  from_max_window_layers,  // Qwen2/Qwen3: use_sliding_window, layers >= max_window_layers
};

// Fills c.layers when some layer slides (sliding layers take c.sliding_rope_* when given).
void set_hf_layer_windows(const nlohmann::json& config, ModelConfig& c, const std::string& source,
                          WindowRule rule);

// The `layer_types` list (true: sliding), or empty when the config has none; throws naming
// the entry for a kind refit does not know, or a length other than the layer count.
std::vector<bool> hf_sliding_layer_types(const nlohmann::json& config, int64_t n_layers,
                                         const std::string& source);

}  // namespace refit
