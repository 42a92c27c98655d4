#include "layers/feed_forward.h"

#include <fmt/format.h>

#include "kernels/ops.h"

namespace refit {

FeedForward::FeedForward(ParameterSet& params, int64_t layer, int64_t dim, int64_t hidden, DType weight_dtype,
                         const TensorParallel& tp)
    : gate_up_proj_(Linear::column(params, fmt::format("model.layers.{}.mlp.gate_up_proj", layer),
                                   {{fmt::format("model.layers.{}.mlp.gate_proj", layer), hidden},
                                    {fmt::format("model.layers.{}.mlp.up_proj", layer), hidden}},
                                   dim, false, weight_dtype, tp)),
      down_proj_(Linear::row(params, fmt::format("model.layers.{}.mlp.down_proj", layer),
                             fmt::format("model.layers.{}.mlp.down_proj", layer), hidden, dim, 1, false,
                             weight_dtype, tp)) {}

Tensor FeedForward::forward(const Tensor& x) const {
  const int64_t local = gate_up_proj_.local_rows()[0];
  Tensor gate_up = gate_up_proj_.forward(x);  // [T, 2 * local]: gate rows, then up rows
  Tensor gate = gate_up.narrow(1, 0, local).contiguous();
  Tensor up = gate_up.narrow(1, local, local).contiguous();
  ops::silu_mul(gate, up, gate);
  return down_proj_.forward(gate);
}

}  // namespace refit
