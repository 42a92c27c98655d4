#include "layers/self_attention.h"

#include <memory>

#include "core/error.h"
#include "kernels/ops.h"

namespace refit {
namespace {

// One sink per query head, split across ranks as q_proj's heads (split_units), so that a
// rank holds exactly the sinks of the heads it attends with.
std::unique_ptr<Parameter> sinks_parameter(const AttentionSpec& s, const TensorParallel& tp,
                                           int64_t local_heads) {
  auto [first, count] = split_units(s.n_heads, tp.rank(), tp.world(), s.sinks);
  if (count != local_heads)
    fail("{}: {} sinks on rank {} but {} query heads", s.sinks, count, tp.rank(), local_heads);
  const SubShard shard{s.sinks, {s.n_heads}, tp.world() > 1 ? 0 : -1, first, count, 0, count};
  return std::make_unique<Parameter>(s.sinks, Shape{count}, DType::f32,
                                     std::vector<SubShard>{shard}, tp.rank(), tp.world());
}

}  // namespace

SelfAttention::SelfAttention(ParameterSet& params, const AttentionSpec& s, DType weight_dtype,
                             const TensorParallel& tp)
    : spec_(s),
      qkv_proj_(Linear::column(params, s.qkv_name, s.qkv, s.dim, s.bias, weight_dtype, tp)),
      o_proj_(Linear::row(params, s.o_proj, s.o_proj, s.n_heads * s.head_dim, s.dim, s.head_dim,
                          s.o_bias, weight_dtype, tp)) {
  local_heads_ = qkv_proj_.local_rows()[0] / s.head_dim;
  local_kv_heads_ = qkv_proj_.local_rows()[1] / s.head_dim;
  if (!s.q_norm.empty()) {
    q_norm_ = &params.add(s.q_norm, {s.head_dim}, DType::f32);
    k_norm_ = &params.add(s.k_norm, {s.head_dim}, DType::f32);
  }
  if (!s.sinks.empty()) sinks_ = &params.add(sinks_parameter(s, tp, local_heads_));
}

Tensor SelfAttention::sinks() const { return sinks_ ? sinks_->data() : Tensor(); }

QkvProjection SelfAttention::project(const Tensor& x, const Tensor& positions,
                                     const Tensor& rope_table) const {
  const int64_t T = x.size(0), hd = spec_.head_dim;
  Tensor qkv = qkv_proj_.forward(x);  // [T, (local_heads + 2 * local_kv_heads) * hd]
  QkvProjection p;
  // Each filled in full by its copy below.
  p.q = Tensor::empty({T, local_heads_, hd}, DType::f32, Device::cpu(), StorageUse::overwritten);
  p.k = Tensor::empty({T, local_kv_heads_, hd}, DType::f32, Device::cpu(), StorageUse::overwritten);
  p.v = Tensor::empty({T, local_kv_heads_, hd}, DType::f32, Device::cpu(), StorageUse::overwritten);
  const int64_t nq = local_heads_ * hd, nkv = local_kv_heads_ * hd;
  p.q.view({T, nq}).copy_from(qkv.narrow(1, 0, nq));
  p.k.view({T, nkv}).copy_from(qkv.narrow(1, nq, nkv));
  p.v.view({T, nkv}).copy_from(qkv.narrow(1, nq + nkv, nkv));
  if (q_norm_) {
    Tensor q2 = p.q.view({T * local_heads_, hd});
    ops::rms_norm(q2, q_norm_->data(), spec_.norm_eps, q2, spec_.norm_weight_offset);
    Tensor k2 = p.k.view({T * local_kv_heads_, hd});
    ops::rms_norm(k2, k_norm_->data(), spec_.norm_eps, k2, spec_.norm_weight_offset);
  }
  ops::rope(p.q, positions, rope_table, spec_.rope_style);
  ops::rope(p.k, positions, rope_table, spec_.rope_style);
  return p;
}

Tensor SelfAttention::output(const Tensor& attn) const {
  return o_proj_.forward(attn.view({attn.size(0), local_heads_ * spec_.head_dim}));
}

Tensor SelfAttention::forward(const Tensor& x, const Tensor& positions, const Tensor& rope_table,
                              int64_t layer, KvStore& kv) const {
  QkvProjection p = project(x, positions, rope_table);
  kv.write(layer, p.k, p.v);
  Tensor attn = Tensor::empty(p.q.shape(), DType::f32);
  kv.attend(layer, p.q, spec_.scale, spec_.window, sinks(), attn);
  return output(attn);
}

}  // namespace refit
