// Qwen3: Llama's block with a per-head RMSNorm of q and k before rope, and a head
// dimension that need not be hidden / heads. GGUF rows are in Hugging Face order.
#include "models/architecture.h"

namespace refit {
namespace {

void configure_hf(const nlohmann::json&, ModelConfig& c, const std::string&) { c.qk_norm = true; }
void configure_gguf(const GgufMetadata&, ModelConfig& c) { c.qk_norm = true; }

}  // namespace

const ArchitectureDef& qwen3_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::qwen3,
      .name = "qwen3",
      .hf_names = {"Qwen3ForCausalLM"},
      .tensors = llama_tensor_names(/*gguf_rope_permute=*/false),
      .configure_hf = configure_hf,
      .configure_gguf = configure_gguf,
  };
  return def;
}

}  // namespace refit
