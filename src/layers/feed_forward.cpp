#include "layers/feed_forward.h"

#include "kernels/ops.h"

namespace refit {

FeedForward::FeedForward(ParameterSet& params, const FeedForwardSpec& s, DType weight_dtype,
                         const TensorParallel& tp)
    : gate_up_proj_(
          Linear::column(params, s.gate_up_name, s.gate_up, s.dim, false, weight_dtype, tp)),
      down_proj_(Linear::row(params, s.down_proj, s.down_proj, s.hidden, s.dim, 1, false,
                             weight_dtype, tp)),
      gelu_tanh_(s.gelu_tanh) {}

Tensor FeedForward::forward(const Tensor& x) const {
  const int64_t local = gate_up_proj_.local_rows()[0];
  Tensor gate_up = gate_up_proj_.forward(x);  // [T, 2 * local]: gate rows, then up rows
  Tensor gate = gate_up.narrow(1, 0, local).contiguous();
  Tensor up = gate_up.narrow(1, local, local).contiguous();
  if (gelu_tanh_)
    ops::gelu_tanh_mul(gate, up, gate);
  else
    ops::silu_mul(gate, up, gate);
  return down_proj_.forward(gate);
}

}  // namespace refit
