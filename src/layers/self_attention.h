// Grouped-query self-attention with rotary embeddings: a fused QKV-parallel projection
// (optional biases: Qwen2), optional per-head RMSNorm of q and k before rope (Qwen3,
// Gemma 3), attention through a KvStore (optionally a sliding window, optionally a learned
// sink logit per head: gpt-oss), and a row-parallel output projection.
#pragma once

#include <string>
#include <vector>

#include "layers/kv_store.h"
#include "layers/linear.h"
#include "layers/rotary.h"

namespace refit {

struct QkvProjection {
  Tensor q;  // f32 [T, local_heads, head_dim], rope applied
  Tensor k;  // f32 [T, local_kv_heads, head_dim], rope applied
  Tensor v;  // f32 [T, local_kv_heads, head_dim]
};

// Everything one attention layer needs to know; the model fills it from its config and
// its architecture's tensor names.
struct AttentionSpec {
  std::string qkv_name;           // the fused parameter: "model.layers.0.self_attn.qkv_proj"
  std::vector<LinearSource> qkv;  // q, k, v rows (separate or fused checkpoint tensors)
  std::string o_proj;             // checkpoint prefix of the output projection
  std::string q_norm, k_norm;     // per-head norm weights; empty: none
  // Per-head attention sinks, f32 [n_heads] ("model.layers.0.self_attn.sinks"); empty: none.
  // Split by query heads under tensor parallelism, as q_proj's rows.
  std::string sinks;
  int64_t dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  bool bias = false;    // q, k, v biases
  bool o_bias = false;  // o_proj bias (added once, after the all-reduce)
  float norm_eps = 1e-5f;
  float norm_weight_offset = 0.0f;
  float scale = 0.0f;  // softmax scale
  int64_t window = 0;  // sliding window; 0: full causal attention
  ops::RopeStyle rope_style = ops::RopeStyle::neox;
};

class SelfAttention {
 public:
  SelfAttention(ParameterSet& params, const AttentionSpec& spec, DType weight_dtype,
                const TensorParallel& tp);

  QkvProjection project(const Tensor& x, const Tensor& positions, const Tensor& rope_table) const;
  // attn: f32 [T, local_heads, head_dim] -> [T, dim] (all-reduced across ranks).
  Tensor output(const Tensor& attn) const;
  // x: f32 [N, dim] (already normalised), the batch's new tokens; returns [N, dim].
  Tensor forward(const Tensor& x, const Tensor& positions, const Tensor& rope_table, int64_t layer,
                 KvStore& kv) const;

  int64_t local_heads() const { return local_heads_; }
  int64_t local_kv_heads() const { return local_kv_heads_; }
  float scale() const { return spec_.scale; }
  int64_t window() const { return spec_.window; }
  // This rank's heads' sinks, f32 [local_heads]; undefined without sinks.
  Tensor sinks() const;

 private:
  AttentionSpec spec_;
  Linear qkv_proj_, o_proj_;
  Parameter* q_norm_ = nullptr;
  Parameter* k_norm_ = nullptr;
  Parameter* sinks_ = nullptr;
  int64_t local_heads_, local_kv_heads_;
};

}  // namespace refit
