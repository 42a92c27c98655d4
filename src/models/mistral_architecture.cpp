// Mistral: Llama's tensors and math, plus an optional sliding window (config.json
// `sliding_window`: null in v0.2+, 4096 in v0.1) on every layer, or on the layers
// `layer_types` marks sliding_attention; attention_bias as Llama's.
#include <nlohmann/json.hpp>

#include "models/architecture.h"
#include "models/hf_layer_windows.h"

namespace refit {
namespace {

void configure_hf(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  read_hf_attention_bias(j, c, source);
  set_hf_layer_windows(j, c, source, WindowRule::every_layer);
}

}  // namespace

const ArchitectureDef& mistral_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::mistral,
      .name = "mistral",
      .hf_names = {"MistralForCausalLM"},
      .tensors = llama_tensor_names(/*gguf_rope_permute=*/true),
      .hf_fields = {"attention_bias", "sliding_window", "layer_types"},
      .configure_hf = configure_hf,
  };
  return def;
}

}  // namespace refit
