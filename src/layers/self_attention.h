// Grouped-query self-attention with rotary embeddings: a fused QKV-parallel projection
// (optional biases: Qwen2), optional per-head RMSNorm of q and k before rope (Qwen3),
// causal attention over a KV cache, and a row-parallel output projection.
//
// project() and output() are the halves around the attention itself, so another cache
// layout (the server's paged cache) reuses them unchanged.
#pragma once

#include "layers/kv_cache.h"
#include "layers/linear.h"
#include "models/model_config.h"

namespace refit {

struct QkvProjection {
  Tensor q;  // f32 [T, local_heads, head_dim], rope applied
  Tensor k;  // f32 [T, local_kv_heads, head_dim], rope applied
  Tensor v;  // f32 [T, local_kv_heads, head_dim]
};

class SelfAttention {
 public:
  SelfAttention(ParameterSet& params, int64_t layer, const ModelConfig& config, DType weight_dtype,
                const TensorParallel& tp);

  QkvProjection project(const Tensor& x, const Tensor& positions, const Tensor& rope_table) const;
  // attn: f32 [T, local_heads, head_dim] -> [T, dim] (all-reduced across ranks).
  Tensor output(const Tensor& attn) const;

  // x: f32 [T, dim] (already normalised) at positions start_pos..; returns [T, dim].
  Tensor forward(const Tensor& x, const Tensor& positions, const Tensor& rope_table, int64_t start_pos,
                 Tensor& k_cache, Tensor& v_cache) const;

  int64_t local_heads() const { return local_heads_; }
  int64_t local_kv_heads() const { return local_kv_heads_; }
  float scale() const;

 private:
  const ModelConfig& config_;
  Linear qkv_proj_, o_proj_;
  Parameter* q_norm_ = nullptr;
  Parameter* k_norm_ = nullptr;
  int64_t local_heads_, local_kv_heads_;
};

}  // namespace refit
