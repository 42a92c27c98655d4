// SwiGLU feed-forward: down(silu(gate(x)) * up(x)), with gate/up fused into one
// merged column-parallel weight and down row-parallel.
#pragma once

#include "layers/linear.h"

namespace refit {

class FeedForward {
 public:
  FeedForward(ParameterSet& params, int64_t layer, int64_t dim, int64_t hidden, DType weight_dtype,
              const TensorParallel& tp);
  Tensor forward(const Tensor& x) const;  // [T, dim] -> [T, dim]

 private:
  Linear gate_up_proj_, down_proj_;
};

}  // namespace refit
