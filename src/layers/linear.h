// Linear layers in vLLM's vocabulary, y = x · W^T (+ b) with W [out, in] (nn.Linear):
//
//   replicated         every rank holds all of W
//   column-parallel    rows of W (output features) split across ranks; output stays split
//   merged column      several checkpoint tensors fused along rows (gate/up), each split
//   QKV-parallel       q, k, v fused and split by heads; KV heads replicated when there
//                      are more ranks than KV heads
//   row-parallel       columns of W (input features) split; partial outputs all-reduced,
//                      then the bias added once
//
// The matmul kernel is chosen by dispatch from the weight's dtype and layout (law L3);
// a quantized weight (Parameter::quantization) runs ops::matmul_quantized with its scales
// (matmul_weight below).
#pragma once

#include <string>
#include <vector>

#include "layers/tensor_parallel.h"
#include "weights/parameter_set.h"

namespace refit {

// out = x · W^T (+ bias) for a weight as it is stored: a float weight through ops::matmul
// on its matmul view; a quantized one through ops::matmul_quantized with its scales, the
// activations quantized first where its scheme is W8A8 (FP8 per token, or with the static
// per-tensor scale of Parameter::input_scales; Q8_0 and MXFP4 per block of 32, for the
// integer-dot kernels). Linear layers and the LM head both run it, so
// a scheme computes the same arithmetic wherever its weight sits.
void matmul_weight(const Tensor& x, const Parameter& weight, const Tensor& bias, Tensor& out);
// The same on rows [row0, row0 + rows) of a weight stored in plain row order (one expert of
// a stacked mixture-of-experts parameter): out [M, rows]. Throws for a kernel layout.
void matmul_weight_rows(const Tensor& x, const Parameter& weight, int64_t row0, int64_t rows,
                        const Tensor& bias, Tensor& out);

enum class ParallelStyle : uint8_t { replicated, column, row };

// One checkpoint tensor feeding (part of) a linear layer's rows.
struct LinearSource {
  std::string checkpoint_prefix;  // "model.layers.0.self_attn.q_proj" (+ ".weight"/".bias")
  int64_t out_features;           // rows this source contributes
  int64_t unit_rows = 1;          // rows per unit that must stay together (a head)
  // A source may be a row range of a tensor the checkpoint stores fused (Phi-3's
  // qkv_proj): its first row there, and that tensor's row count (0: out_features).
  int64_t checkpoint_row0 = 0;
  int64_t checkpoint_rows = 0;
};

class Linear {
 public:
  // Column-parallel (or replicated) layer fused from `sources`.
  static Linear column(ParameterSet& params, const std::string& name,
                       std::vector<LinearSource> sources, int64_t in_features, bool bias,
                       DType dtype, const TensorParallel& tp, bool replicated = false);
  // Row-parallel layer: input features split in units of `in_unit` columns.
  static Linear row(ParameterSet& params, const std::string& name,
                    const std::string& checkpoint_prefix, int64_t in_features, int64_t out_features,
                    int64_t in_unit, bool bias, DType dtype, const TensorParallel& tp);

  // x: f32 [T, local in]; returns f32 [T, local out] (row-parallel: full out, reduced).
  Tensor forward(const Tensor& x) const;
  Parameter& weight() const { return *weight_; }
  Parameter* bias() const { return bias_; }
  int64_t local_out() const { return local_out_; }
  // Local rows of each source, in fusion order (to split a fused output).
  const std::vector<int64_t>& local_rows() const { return local_rows_; }

 private:
  Linear() = default;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  ParallelStyle style_ = ParallelStyle::replicated;
  int64_t local_out_ = 0;
  std::vector<int64_t> local_rows_;
  std::shared_ptr<Communicator> communicator_;
};

}  // namespace refit
