#include "layers/feed_forward.h"

#include "kernels/ops.h"

namespace refit {

FeedForward::FeedForward(ParameterSet& params, const FeedForwardSpec& s, DType weight_dtype,
                         const TensorParallel& tp)
    : gate_up_proj_(
          Linear::column(params, s.gate_up_name, s.gate_up, s.dim, s.bias, weight_dtype, tp)),
      down_proj_(Linear::row(params, s.down_proj, s.down_proj, s.hidden, s.dim, 1, s.bias,
                             weight_dtype, tp)),
      activation_(s.activation) {}

Tensor FeedForward::forward(const Tensor& x) const {
  const int64_t local = gate_up_proj_.local_rows()[0];
  Tensor gate_up = gate_up_proj_.forward(x);  // [T, 2 * local]: gate rows, then up rows
  // The two halves are read in place (strided rows) into one new contiguous activation.
  const Tensor gate = gate_up.narrow(1, 0, local), up = gate_up.narrow(1, local, local);
  Tensor act =
      Tensor::empty({x.size(0), local}, DType::f32, Device::cpu(), StorageUse::overwritten);
  switch (activation_) {
    case Activation::silu:
      ops::silu_mul(gate, up, act);
      break;
    case Activation::gelu_tanh:
      ops::gelu_tanh_mul(gate, up, act);
      break;
    case Activation::gelu_erf:
      ops::gelu_erf_mul(gate, up, act);
      break;
  }
  return down_proj_.forward(act);
}

}  // namespace refit
