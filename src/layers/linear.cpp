#include "layers/linear.h"

#include "kernels/ops.h"

namespace refit {

Linear::Linear(ParameterSet& params, const std::string& prefix, int64_t in_features,
               int64_t out_features, bool bias, DType weight_dtype)
    : out_features_(out_features) {
  weight_ = &params.add(prefix + ".weight", {out_features, in_features}, weight_dtype);
  if (bias) bias_ = &params.add(prefix + ".bias", {out_features}, DType::f32);
}

Tensor Linear::forward(const Tensor& x) const {
  Tensor out = Tensor::empty({x.size(0), out_features_}, DType::f32);
  ops::matmul(x, weight_->data(), bias_ ? bias_->data() : Tensor(), out);
  return out;
}

}  // namespace refit
