#include "layers/feed_forward.h"

#include "kernels/ops.h"

namespace refit {

FeedForward::FeedForward(ParameterSet& params, const std::string& prefix, int64_t dim,
                         int64_t hidden, DType weight_dtype)
    : gate_proj_(params, prefix + ".gate_proj", dim, hidden, false, weight_dtype),
      up_proj_(params, prefix + ".up_proj", dim, hidden, false, weight_dtype),
      down_proj_(params, prefix + ".down_proj", hidden, dim, false, weight_dtype) {}

Tensor FeedForward::forward(const Tensor& x) const {
  Tensor gate = gate_proj_.forward(x);
  Tensor up = up_proj_.forward(x);
  ops::silu_mul(gate, up, gate);
  return down_proj_.forward(gate);
}

}  // namespace refit
