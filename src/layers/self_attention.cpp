#include "layers/self_attention.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/ops.h"

namespace refit {

SelfAttention::SelfAttention(ParameterSet& params, const std::string& prefix,
                             const ModelConfig& c, DType weight_dtype)
    : config_(c),
      q_proj_(params, prefix + ".q_proj", c.dim, c.q_dim(), c.qkv_bias, weight_dtype),
      k_proj_(params, prefix + ".k_proj", c.dim, c.kv_dim(), c.qkv_bias, weight_dtype),
      v_proj_(params, prefix + ".v_proj", c.dim, c.kv_dim(), c.qkv_bias, weight_dtype),
      o_proj_(params, prefix + ".o_proj", c.q_dim(), c.dim, false, weight_dtype) {
  if (c.qk_norm) {
    q_norm_ = &params.add(prefix + ".q_norm.weight", {c.head_dim}, DType::f32);
    k_norm_ = &params.add(prefix + ".k_norm.weight", {c.head_dim}, DType::f32);
  }
}

Tensor SelfAttention::forward(const Tensor& x, const Tensor& positions, const Tensor& rope_table,
                              int64_t start_pos, Tensor& k_cache, Tensor& v_cache) const {
  const ModelConfig& c = config_;
  const int64_t T = x.size(0);
  if (start_pos + T > k_cache.size(0))
    fail("context length exceeded: positions {}..{} do not fit the {}-token cache", start_pos,
         start_pos + T - 1, k_cache.size(0));
  Tensor q = q_proj_.forward(x).view({T, c.n_heads, c.head_dim});
  Tensor k = k_proj_.forward(x).view({T, c.n_kv_heads, c.head_dim});
  Tensor v = v_proj_.forward(x).view({T, c.n_kv_heads, c.head_dim});
  if (q_norm_) {
    Tensor q2 = q.view({T * c.n_heads, c.head_dim});
    ops::rms_norm(q2, q_norm_->data(), c.rms_eps, q2);
    Tensor k2 = k.view({T * c.n_kv_heads, c.head_dim});
    ops::rms_norm(k2, k_norm_->data(), c.rms_eps, k2);
  }
  ops::rope(q, positions, rope_table, c.rope_style);
  ops::rope(k, positions, rope_table, c.rope_style);
  // The cache rows of the new tokens are contiguous: copy them in place.
  const size_t row_bytes = static_cast<size_t>(c.kv_dim()) * sizeof(float);
  std::memcpy(k_cache.data<float>() + start_pos * c.kv_dim(), k.data<float>(), T * row_bytes);
  std::memcpy(v_cache.data<float>() + start_pos * c.kv_dim(), v.data<float>(), T * row_bytes);
  Tensor attn = Tensor::empty({T, c.n_heads, c.head_dim}, DType::f32);
  ops::attention(q, k_cache, v_cache, start_pos, 1.0f / std::sqrt(static_cast<float>(c.head_dim)), attn);
  return o_proj_.forward(attn.view({T, c.q_dim()}));
}

}  // namespace refit
