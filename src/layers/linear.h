// y = x · W^T (+ b), W stored [out_features, in_features] as nn.Linear does. The matmul
// kernel is chosen by dispatch from the weight's dtype and layout (law L3).
#pragma once

#include "weights/parameter_set.h"

namespace refit {

class Linear {
 public:
  Linear(ParameterSet& params, const std::string& prefix, int64_t in_features,
         int64_t out_features, bool bias, DType weight_dtype);
  // x: f32 [T, in]; returns f32 [T, out].
  Tensor forward(const Tensor& x) const;
  Parameter& weight() const { return *weight_; }
  Parameter* bias() const { return bias_; }
  int64_t out_features() const { return out_features_; }

 private:
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  int64_t out_features_;
};

}  // namespace refit
