// Qwen3: Llama's block with a per-head RMSNorm of q and k before rope, and a head
// dimension that need not be hidden / heads; attention_bias (q, k, v, o) as Llama's, and
// Qwen2's sliding-window rule. GGUF rows are in Hugging Face order.
#include <nlohmann/json.hpp>

#include "models/architecture.h"
#include "models/hf_layer_windows.h"

namespace refit {
namespace {

void configure_hf(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  c.qk_norm = true;
  read_hf_attention_bias(j, c, source);
  set_hf_layer_windows(j, c, source, WindowRule::from_max_window_layers);
}
void configure_gguf(const GgufMetadata&, ModelConfig& c) { c.qk_norm = true; }

}  // namespace

const ArchitectureDef& qwen3_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::qwen3,
      .name = "qwen3",
      .hf_names = {"Qwen3ForCausalLM"},
      .tensors = llama_tensor_names(/*gguf_rope_permute=*/false),
      .hf_fields = {"attention_bias", "use_sliding_window", "sliding_window", "max_window_layers",
                    "layer_types"},
      .configure_hf = configure_hf,
      .configure_gguf = configure_gguf,
  };
  return def;
}

}  // namespace refit
