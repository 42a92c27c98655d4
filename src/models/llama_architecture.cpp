// Llama 1/2/3 (and llama2.c, TinyLlama, SmolLM): the reference decoder. Pre-norm blocks,
// SwiGLU FFN, rotate_half rope (optionally Llama 3.1-scaled), untied or tied embeddings.
// llama.cpp's converter permutes q/k rows for its adjacent-pair rope; the table says so,
// and the loader permutes them back.
#include "models/architecture.h"

namespace refit {

const ArchitectureDef& llama_architecture() {
  static const ArchitectureDef def{
      .id = Architecture::llama,
      .name = "llama",
      .hf_names = {"LlamaForCausalLM"},
      .tensors = llama_tensor_names(/*gguf_rope_permute=*/true),
  };
  return def;
}

}  // namespace refit
