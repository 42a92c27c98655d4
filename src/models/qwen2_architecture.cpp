// Qwen2 / Qwen2.5: Llama's block with biases on q, k and v (always; o_proj never). GGUF
// rows are in Hugging Face order (NEOX rope). A sliding window, when use_sliding_window is
// set, covers the layers from max_window_layers on, or those layer_types marks
// (transformers' layer_types rule, models/hf_layer_windows.h).
#include <nlohmann/json.hpp>

#include "models/architecture.h"
#include "models/hf_layer_windows.h"

namespace refit {
namespace {

void configure_hf(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  c.qkv_bias = true;
  set_hf_layer_windows(j, c, source, WindowRule::from_max_window_layers);
}

void configure_gguf(const GgufMetadata&, ModelConfig& c) { c.qkv_bias = true; }

}  // namespace

const ArchitectureDef& qwen2_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::qwen2,
      .name = "qwen2",
      .hf_names = {"Qwen2ForCausalLM"},
      .tensors = llama_tensor_names(/*gguf_rope_permute=*/false),
      .hf_fields = {"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"},
      .configure_hf = configure_hf,
      .configure_gguf = configure_gguf,
  };
  return def;
}

}  // namespace refit
