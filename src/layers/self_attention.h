// Grouped-query self-attention with rotary embeddings: q/k/v projections (optional
// biases: Qwen2), optional per-head RMSNorm of q and k before rope (Qwen3), causal
// attention over the KV cache, output projection.
#pragma once

#include <optional>

#include "layers/kv_cache.h"
#include "layers/linear.h"
#include "models/model_config.h"

namespace refit {

class SelfAttention {
 public:
  SelfAttention(ParameterSet& params, const std::string& prefix, const ModelConfig& config,
                DType weight_dtype);
  // x: f32 [T, dim] (already normalised) for positions start_pos..; returns [T, dim].
  Tensor forward(const Tensor& x, const Tensor& positions, const Tensor& rope_table,
                 int64_t start_pos, Tensor& k_cache, Tensor& v_cache) const;

 private:
  const ModelConfig& config_;
  Linear q_proj_, k_proj_, v_proj_, o_proj_;
  Parameter* q_norm_ = nullptr;
  Parameter* k_norm_ = nullptr;
};

}  // namespace refit
