#include "models/gguf_rope_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace refit {

void read_gguf_rope_scaling(const GgufMetadata& m, const std::string& arch_name, ModelConfig& c) {
  auto key = [&](const char* suffix) { return arch_name + "." + suffix; };
  const std::optional<std::string> type = m.get_string(key("rope.scaling.type"));
  if (!type || *type == "none") return;
  RopeScaling& s = c.rope_scaling;
  if (*type == "linear") {
    s.kind = RopeScalingKind::linear;
    s.factor = m.get_f32(key("rope.scaling.factor")).value_or(1.0f);
    return;
  }
  // Other types (longrope: its factors are tensors, read by the loader) are left alone.
  if (*type != "yarn") return;
  s.kind = RopeScalingKind::yarn;
  s.factor = m.get_f32(key("rope.scaling.factor")).value_or(1.0f);
  s.original_max_position = m.get_u32(key("rope.scaling.original_context_length"))
                                .value_or(static_cast<uint32_t>(c.max_seq_len));
  s.beta_fast = m.get_f32(key("rope.scaling.yarn_beta_fast")).value_or(32.0f);
  s.beta_slow = m.get_f32(key("rope.scaling.yarn_beta_slow")).value_or(1.0f);
  s.truncate = true;  // ggml_rope_yarn_corr_dims floors and ceils the correction range
  const float attn_factor = m.get_f32(key("rope.scaling.yarn_attn_factor")).value_or(1.0f);
  // rope_yarn: mscale = attn_factor * (1 + 0.1 ln(1 / freq_scale)) with ext_factor != 0.
  s.attention_factor = attn_factor * (1.0f + 0.1f * std::log(s.factor));
}

std::vector<bool> llamacpp_swa_pattern_layers(int64_t n_layers, int64_t pattern) {
  std::vector<bool> sliding(static_cast<size_t>(std::max<int64_t>(n_layers, 0)));
  for (int64_t l = 0; l < n_layers; ++l)
    sliding[static_cast<size_t>(l)] = pattern == 0 || l % pattern < pattern - 1;
  return sliding;
}

void set_sliding_layers(ModelConfig& c, int64_t window, const std::vector<bool>& sliding) {
  if (static_cast<int64_t>(sliding.size()) != c.n_layers)
    fail("sliding layers: {} entries for {} layers", sliding.size(), c.n_layers);
  if (window < 0) fail("sliding window must be >= 0, got {}", window);
  std::vector<LayerConfig> layers;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerConfig lc = c.layer(l);
    lc.window = sliding[static_cast<size_t>(l)] ? window : 0;
    layers.push_back(lc);
  }
  c.layers = std::move(layers);
}

}  // namespace refit
