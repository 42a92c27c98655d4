// Every tensor of a Llama-family model, under its Hugging Face name (refit's canonical
// parameter name: what trainers send) and its GGUF name (llama.cpp's), with its shape.
// Shapes are row-major; matmul weights are [out_features, in_features] (nn.Linear).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/model_config.h"

namespace refit {

enum class TensorRole : uint8_t {
  embedding,  // [vocab, dim]
  matmul,     // [out, in]
  norm,       // [dim] or [head_dim]
  bias,       // [out]
};

struct TensorSpec {
  std::string hf_name;    // "model.layers.0.self_attn.q_proj.weight"
  std::string gguf_name;  // "blk.0.attn_q.weight"
  Shape shape;
  TensorRole role;
  int64_t layer = -1;  // -1 for global tensors
  // For HF llama q/k: llama.cpp's converter permutes rows so that its adjacent-pair
  // ("NORM") rope equals HF's rotate_half rope; this is the head count to permute with
  // (0 when the tensor is not permuted).
  int64_t gguf_rope_permute_heads = 0;
};

std::vector<TensorSpec> model_tensor_specs(const ModelConfig& config);

// HF row order -> llama.cpp GGUF row order for a q/k weight or bias of `n_heads` heads:
// view rows as [n_heads, 2, head_dim/2], swap the last two, i.e. rows
// (h, half, i) -> (h, i, half). `inverse` goes from GGUF back to HF.
Tensor permute_rows_for_gguf_rope(const Tensor& w, int64_t n_heads, bool inverse = false);

}  // namespace refit
