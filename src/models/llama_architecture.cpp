// Llama 1/2/3 (and llama2.c, TinyLlama, SmolLM): the reference decoder. Pre-norm blocks,
// SwiGLU FFN, rotate_half rope (optionally Llama 3.1-scaled), untied or tied embeddings,
// optional biases (attention_bias: q, k, v, o; mlp_bias: gate, up, down).
// llama.cpp's converter permutes q/k rows for its adjacent-pair rope; the table says so,
// and the loader permutes them back.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/architecture.h"

namespace refit {
namespace {

void configure_hf(const nlohmann::json& j, ModelConfig& c, const std::string& source) {
  read_hf_attention_bias(j, c, source);
  if (j.contains("mlp_bias") && !j["mlp_bias"].is_null()) {
    if (!j["mlp_bias"].is_boolean())
      throw FormatError(fmt::format("{}: mlp_bias must be true or false", source));
    c.mlp_bias = j["mlp_bias"].get<bool>();
  }
}

}  // namespace

const ArchitectureDef& llama_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::llama,
      .name = "llama",
      .hf_names = {"LlamaForCausalLM"},
      .tensors = llama_tensor_names(/*gguf_rope_permute=*/true),
      .hf_fields = {"attention_bias", "mlp_bias"},
      .configure_hf = configure_hf,
  };
  return def;
}

}  // namespace refit
