// Mistral: Llama's tensors and math, plus an optional sliding window on every layer
// (config.json `sliding_window`; null in v0.2+, 4096 in v0.1).
#include <nlohmann/json.hpp>

#include "models/architecture.h"

namespace refit {
namespace {

void configure_hf(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  if (j.contains("sliding_window") && j["sliding_window"].is_number_integer() &&
      j.value("use_sliding_window", true))
    c.sliding_window = j["sliding_window"].get<int64_t>();
}

}  // namespace

const ArchitectureDef& mistral_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::mistral,
      .name = "mistral",
      .hf_names = {"MistralForCausalLM"},
      .tensors = llama_tensor_names(/*gguf_rope_permute=*/true),
      .configure_hf = configure_hf,
  };
  return def;
}

}  // namespace refit
