// Gated feed-forward: down(act(gate(x)) * up(x)) with SwiGLU (silu) or GeGLU (tanh or exact
// GELU), gate/up fused into one merged column-parallel weight and down row-parallel, with
// optional biases (Llama's mlp_bias; down's bias is added once, after the all-reduce).
#pragma once

#include <string>
#include <vector>

#include "layers/linear.h"

namespace refit {

// The gate's activation (Hugging Face hidden_act).
enum class Activation : uint8_t {
  silu,       // SwiGLU: silu(gate) * up ("silu", "swish")
  gelu_tanh,  // GeGLU with PyTorch's tanh-approximated GELU ("gelu_pytorch_tanh", "gelu_new")
  gelu_erf,   // GeGLU with the exact, erf GELU ("gelu")
};

struct FeedForwardSpec {
  std::string gate_up_name;           // the fused parameter: "model.layers.0.mlp.gate_up_proj"
  std::vector<LinearSource> gate_up;  // gate rows, then up rows (separate or one fused tensor)
  std::string down_proj;              // checkpoint prefix
  int64_t dim = 0, hidden = 0;
  Activation activation = Activation::silu;
  bool bias = false;  // gate, up and down biases
};

class FeedForward {
 public:
  FeedForward(ParameterSet& params, const FeedForwardSpec& spec, DType weight_dtype,
              const TensorParallel& tp);
  Tensor forward(const Tensor& x) const;  // [T, dim] -> [T, dim]

 private:
  Linear gate_up_proj_, down_proj_;
  Activation activation_;
};

}  // namespace refit
