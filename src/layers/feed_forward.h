// SwiGLU feed-forward: down(silu(gate(x)) * up(x)).
#pragma once

#include "layers/linear.h"

namespace refit {

class FeedForward {
 public:
  FeedForward(ParameterSet& params, const std::string& prefix, int64_t dim, int64_t hidden,
              DType weight_dtype);
  Tensor forward(const Tensor& x) const;  // [T, dim] -> [T, dim]

 private:
  Linear gate_proj_, up_proj_, down_proj_;
};

}  // namespace refit
