#include "models/hf_layer_windows.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace refit {

std::vector<bool> hf_sliding_layer_types(const nlohmann::json& j, int64_t n_layers,
                                         const std::string& source) {
  std::vector<bool> sliding;
  if (!j.contains("layer_types") || j["layer_types"].is_null()) return sliding;
  if (!j["layer_types"].is_array())
    throw FormatError(fmt::format("{}: layer_types must be a list", source));
  for (const auto& t : j["layer_types"]) {
    if (t == "sliding_attention")
      sliding.push_back(true);
    else if (t == "full_attention")
      sliding.push_back(false);
    else
      throw FormatError(
          fmt::format("{}: layer_types entry {} is not supported (refit runs "
                      "sliding_attention and full_attention)",
                      source, t.dump()));
  }
  if (static_cast<int64_t>(sliding.size()) != n_layers)
    throw FormatError(fmt::format("{}: layer_types has {} entries for {} layers", source,
                                  sliding.size(), n_layers));
  return sliding;
}

void set_hf_layer_windows(const nlohmann::json& j, ModelConfig& c, const std::string& source,
                          WindowRule rule) {
  int64_t window = 0;
  if (j.contains("sliding_window") && !j["sliding_window"].is_null()) {
    if (!j["sliding_window"].is_number_integer() || j["sliding_window"].get<int64_t>() <= 0)
      throw FormatError(fmt::format("{}: sliding_window must be a positive integer or null, got {}",
                                    source, j["sliding_window"].dump()));
    window = j["sliding_window"].get<int64_t>();
  }
  if (rule == WindowRule::from_max_window_layers) {
    const auto& use = j.contains("use_sliding_window") ? j["use_sliding_window"] : nlohmann::json();
    if (!use.is_null() && !use.is_boolean())
      throw FormatError(fmt::format("{}: use_sliding_window must be true or false", source));
    if (!use.is_boolean() || !use.get<bool>()) window = 0;
  }
  std::vector<bool> sliding = hf_sliding_layer_types(j, c.n_layers, source);
  if (sliding.empty()) {
    int64_t first = 0;
    if (rule == WindowRule::from_max_window_layers) {
      first = 28;  // transformers' default for Qwen2 and Qwen3
      if (j.contains("max_window_layers") && !j["max_window_layers"].is_null()) {
        if (!j["max_window_layers"].is_number_integer())
          throw FormatError(fmt::format("{}: max_window_layers must be an integer", source));
        first = j["max_window_layers"].get<int64_t>();
      }
    }
    for (int64_t l = 0; l < c.n_layers; ++l) sliding.push_back(l >= first);
  }
  if (window == 0) return;
  bool any = false;
  for (bool s : sliding) any = any || s;
  if (!any) return;
  std::vector<LayerConfig> layers;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerConfig lc = c.layer(l);
    if (sliding[static_cast<size_t>(l)]) {
      lc.window = window;
      if (c.sliding_rope_given) {
        lc.rope.theta = c.sliding_rope_theta;
        lc.rope.scaling = c.sliding_rope_scaling;
      }
    } else {
      lc.window = 0;
    }
    layers.push_back(lc);
  }
  c.layers = std::move(layers);
}

}  // namespace refit
