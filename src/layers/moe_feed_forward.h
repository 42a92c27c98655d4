// Sparse mixture-of-experts feed-forward: a router picks k of E experts per token, each a
// gated FFN of its own, and their outputs are summed with the router's weights.
//
//   logits = x · Wr^T (+ br)                         router, f32 [E, dim], never quantized
//   (ids, w) = moe_route(logits)                     softmax → top-k (renormalised or not),
//                                                    or top-k → softmax (gpt-oss)
//   y_e = down_e(act(gate_e x (+bg_e), up_e x (+bu_e))) (+ bd_e)
//   out = Σ_j w_j · y_{ids_j}                          in slot order j = 0..k-1
//
// Parameters (law L2): ONE stacked parameter per layer for all experts' gate and up rows,
// `<prefix>.experts.w13_weight` [E·2I, dim] (expert e's gate rows at e·2I, its up rows
// at e·2I + I), and one for down, `<prefix>.experts.w2_weight` [E·dim, I] (expert e's rows
// at e·dim) — vLLM's FusedMoE names and layouts, flattened to two dims — each with ONE
// SUB-SHARD PER CHECKPOINT TENSOR (per expert per projection), so any expert or subset
// reloads alone, exactly, in place; quantization (per row) and biases (`w13_bias` [E·2I],
// `w2_bias` [E·dim]) follow the same sub-shards.
//
// The forward groups tokens by expert: one pass over each chosen expert's weights
// (ops::matmul / matmul_quantized on that expert's row view of the stacked parameter) for
// all the rows that chose it, then ops::moe_combine sums each token's k outputs in slot
// order, so a token's output is bitwise the same whatever else is in the batch (given
// row-independent matmul kernels, as for the dense FFN).
//
// Sharding: along I by default (each expert's gate/up rows and down's columns sliced as
// Linear::column / Linear::row slice the dense ones, in blocks of 32 and as evenly as they
// go; the down bias added on rank 0 only), or by expert under TensorParallel::expert_parallel
// (--ep: each rank whole experts); either way the router is replicated, every rank routes
// alike, and the partial outputs are all-reduced.
#pragma once

#include <string>
#include <vector>

#include "kernels/ops.h"
#include "layers/linear.h"

namespace refit {

// An expert's gated activation.
enum class ExpertActivation : uint8_t {
  silu,        // silu(gate) * up (Qwen3-MoE, Mixtral)
  swiglu_oai,  // gpt-oss: (clamp(up, ±limit) + 1) · g · sigmoid(alpha g), g = min(gate, limit)
};

struct MoeSpec {
  std::string router;       // parameter = checkpoint name: "model.layers.0.mlp.gate.weight"
  std::string router_bias;  // "" without a router bias
  // The stacked parameters' names ("model.layers.0.mlp.experts.w13_weight", ...).
  std::string gate_up_name, down_name, gate_up_bias_name, down_bias_name;
  // Per expert, the checkpoint tensors (full names) filling the stacked parameters.
  std::vector<std::string> gate, up, down;
  std::vector<std::string> gate_bias, up_bias, down_bias;  // empty without expert biases
  int64_t dim = 0, hidden = 0, n_experts = 0, n_used = 0;
  ops::RouterScoring scoring = ops::RouterScoring::softmax_topk;
  bool renormalize = true;
  ExpertActivation activation = ExpertActivation::silu;
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;
};

// Routing replay (RL): the experts each token went to, read out, or given back so that a
// rescoring pass routes as the rollout did (slime's and Megatron's routing replay). A forced
// token uses the given experts in the given slot order, weighted by this router's own
// scores for them (as the top-k would have weighted them had it chosen them), so forcing
// the router's own choice changes nothing, bitwise.
struct MoeRouting {
  Tensor forced;  // i32 [T, k] or undefined: rows whose first id is >= 0 are forced
  Tensor chosen;  // i32 [T, k] (a view may be strided) or undefined: filled with each
                  // token's experts in slot order
};

class MoeFeedForward {
 public:
  MoeFeedForward(ParameterSet& params, const MoeSpec& spec, DType weight_dtype,
                 const TensorParallel& tp);
  Tensor forward(const Tensor& x, const MoeRouting& routing = {}) const;  // [T, dim] -> [T, dim]

  const Parameter& router() const { return *router_; }
  const Parameter& gate_up() const { return *gate_up_; }
  const Parameter& down() const { return *down_; }

 private:
  MoeSpec spec_;
  Parameter* router_ = nullptr;
  Parameter* router_bias_ = nullptr;
  Parameter* gate_up_ = nullptr;
  Parameter* down_ = nullptr;
  Parameter* gate_up_bias_ = nullptr;
  Parameter* down_bias_ = nullptr;
  std::shared_ptr<Communicator> communicator_;
  // This rank's share: experts [first_expert_, + local_experts_), and of each its I slice
  // [i0_, i0_ + local_i_) (all of I unless tensor parallelism splits it).
  int64_t first_expert_ = 0, local_experts_ = 0, i0_ = 0, local_i_ = 0;
  bool add_down_bias_ = true;
};

}  // namespace refit
