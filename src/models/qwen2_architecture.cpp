// Qwen2 / Qwen2.5: Llama's block with biases on q, k and v. GGUF rows are in Hugging
// Face order (NEOX rope). A sliding window, when enabled, covers the layers from
// max_window_layers on (transformers' layer_types rule).
#include <nlohmann/json.hpp>

#include "models/architecture.h"

namespace refit {
namespace {

void configure_hf(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  c.qkv_bias = true;
  if (!j.value("use_sliding_window", false) || !j.contains("sliding_window") ||
      !j["sliding_window"].is_number_integer())
    return;
  const int64_t window = j["sliding_window"].get<int64_t>();
  const int64_t first = j.value("max_window_layers", c.n_layers);
  std::vector<LayerConfig> layers;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerConfig lc = c.layer(l);
    lc.window = l >= first ? window : 0;
    layers.push_back(lc);
  }
  c.layers = std::move(layers);
}

void configure_gguf(const GgufMetadata&, ModelConfig& c) { c.qkv_bias = true; }

}  // namespace

const ArchitectureDef& qwen2_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::qwen2,
      .name = "qwen2",
      .hf_names = {"Qwen2ForCausalLM"},
      .tensors = llama_tensor_names(/*gguf_rope_permute=*/false),
      .configure_hf = configure_hf,
      .configure_gguf = configure_gguf,
  };
  return def;
}

}  // namespace refit
