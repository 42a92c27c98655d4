#include "layers/self_attention.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/ops.h"

namespace refit {

SelfAttention::SelfAttention(ParameterSet& params, int64_t layer, const ModelConfig& c, DType weight_dtype,
                             const TensorParallel& tp)
    : config_(c),
      qkv_proj_(Linear::column(params, fmt::format("model.layers.{}.self_attn.qkv_proj", layer),
                               {{fmt::format("model.layers.{}.self_attn.q_proj", layer), c.q_dim(), c.head_dim},
                                {fmt::format("model.layers.{}.self_attn.k_proj", layer), c.kv_dim(), c.head_dim},
                                {fmt::format("model.layers.{}.self_attn.v_proj", layer), c.kv_dim(), c.head_dim}},
                               c.dim, c.qkv_bias, weight_dtype, tp)),
      o_proj_(Linear::row(params, fmt::format("model.layers.{}.self_attn.o_proj", layer),
                          fmt::format("model.layers.{}.self_attn.o_proj", layer), c.q_dim(), c.dim, c.head_dim,
                          false, weight_dtype, tp)) {
  local_heads_ = qkv_proj_.local_rows()[0] / c.head_dim;
  local_kv_heads_ = qkv_proj_.local_rows()[1] / c.head_dim;
  if (c.qk_norm) {
    q_norm_ = &params.add(fmt::format("model.layers.{}.self_attn.q_norm.weight", layer), {c.head_dim}, DType::f32);
    k_norm_ = &params.add(fmt::format("model.layers.{}.self_attn.k_norm.weight", layer), {c.head_dim}, DType::f32);
  }
}

float SelfAttention::scale() const { return 1.0f / std::sqrt(static_cast<float>(config_.head_dim)); }

QkvProjection SelfAttention::project(const Tensor& x, const Tensor& positions, const Tensor& rope_table) const {
  const ModelConfig& c = config_;
  const int64_t T = x.size(0), hd = c.head_dim;
  Tensor qkv = qkv_proj_.forward(x);  // [T, (local_heads + 2 * local_kv_heads) * hd]
  QkvProjection p;
  p.q = Tensor::empty({T, local_heads_, hd}, DType::f32);
  p.k = Tensor::empty({T, local_kv_heads_, hd}, DType::f32);
  p.v = Tensor::empty({T, local_kv_heads_, hd}, DType::f32);
  const int64_t nq = local_heads_ * hd, nkv = local_kv_heads_ * hd;
  p.q.view({T, nq}).copy_from(qkv.narrow(1, 0, nq));
  p.k.view({T, nkv}).copy_from(qkv.narrow(1, nq, nkv));
  p.v.view({T, nkv}).copy_from(qkv.narrow(1, nq + nkv, nkv));
  if (q_norm_) {
    Tensor q2 = p.q.view({T * local_heads_, hd});
    ops::rms_norm(q2, q_norm_->data(), c.rms_eps, q2);
    Tensor k2 = p.k.view({T * local_kv_heads_, hd});
    ops::rms_norm(k2, k_norm_->data(), c.rms_eps, k2);
  }
  ops::rope(p.q, positions, rope_table, c.rope_style);
  ops::rope(p.k, positions, rope_table, c.rope_style);
  return p;
}

Tensor SelfAttention::output(const Tensor& attn) const {
  return o_proj_.forward(attn.view({attn.size(0), local_heads_ * config_.head_dim}));
}

Tensor SelfAttention::forward(const Tensor& x, const Tensor& positions, const Tensor& rope_table,
                              int64_t start_pos, Tensor& k_cache, Tensor& v_cache) const {
  const int64_t T = x.size(0);
  if (start_pos + T > k_cache.size(0))
    fail("context length exceeded: positions {}..{} do not fit the {}-token cache", start_pos, start_pos + T - 1,
         k_cache.size(0));
  QkvProjection p = project(x, positions, rope_table);
  // The cache rows of the new tokens are contiguous: copy them in place.
  const size_t row_bytes = static_cast<size_t>(local_kv_heads_ * config_.head_dim) * sizeof(float);
  std::memcpy(static_cast<char*>(k_cache.raw_data()) + start_pos * row_bytes, p.k.raw_data(), T * row_bytes);
  std::memcpy(static_cast<char*>(v_cache.raw_data()) + start_pos * row_bytes, p.v.raw_data(), T * row_bytes);
  Tensor attn = Tensor::empty({T, local_heads_, config_.head_dim}, DType::f32);
  ops::attention(p.q, k_cache, v_cache, start_pos, scale(), attn);
  return output(attn);
}

}  // namespace refit
