// Gated feed-forward: down(act(gate(x)) * up(x)) with SwiGLU (silu) or GeGLU (tanh GELU),
// gate/up fused into one merged column-parallel weight and down row-parallel.
#pragma once

#include <string>
#include <vector>

#include "layers/linear.h"

namespace refit {

struct FeedForwardSpec {
  std::string gate_up_name;           // the fused parameter: "model.layers.0.mlp.gate_up_proj"
  std::vector<LinearSource> gate_up;  // gate rows, then up rows (separate or one fused tensor)
  std::string down_proj;              // checkpoint prefix
  int64_t dim = 0, hidden = 0;
  bool gelu_tanh = false;  // GeGLU instead of SwiGLU
};

class FeedForward {
 public:
  FeedForward(ParameterSet& params, const FeedForwardSpec& spec, DType weight_dtype,
              const TensorParallel& tp);
  Tensor forward(const Tensor& x) const;  // [T, dim] -> [T, dim]

 private:
  Linear gate_up_proj_, down_proj_;
  bool gelu_tanh_;
};

}  // namespace refit
