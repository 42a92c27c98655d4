// Op entry points: check the arguments against the shape contract in ops.h once, ask the
// registry for the kernel that accepts these tensors (device, dtype, layout, strides),
// check values a kernel would index with (token ids, positions), then run it.
//
// Shape errors are refit::Error naming the op, the argument and expected versus actual;
// "no kernel takes these dtypes/devices" is the registry's DispatchError.
#include "kernels/ops.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

#include "core/error.h"
#include "kernels/op_fns.h"
#include "kernels/op_names.h"

namespace refit::ops {
namespace {

void need_defined(const char* op, const char* name, const Tensor& t) {
  if (!t.defined()) fail("{}: argument '{}' is an undefined tensor", op, name);
}

void need_dims(const char* op, const char* name, const Tensor& t, int64_t dims, const char* what) {
  need_defined(op, name, t);
  if (t.dim() != dims) fail("{}: '{}' must be {}-D {}, got {}", op, name, dims, what, t.str());
}

void need_shape(const char* op, const char* name, const Tensor& t, const Shape& shape,
                const char* what) {
  need_defined(op, name, t);
  if (t.shape() != shape)
    fail("{}: '{}' must have shape {} {}, got {}", op, name, shape_str(shape), what, t.str());
}

void need_writable(const char* op, const char* name, const Tensor& t) {
  if (t.read_only()) fail("{}: output '{}' is read-only ({})", op, name, t.str());
}

template <typename... T>
std::array<const Tensor*, sizeof...(T)> tensors(const T&... t) {
  return {&t...};
}

template <typename Fn, size_t N>
Fn dispatch(const char* op, const std::array<const Tensor*, N>& args, bool* on_cpu = nullptr) {
  const Kernel& k = KernelRegistry::global().select(op, std::span<const Tensor* const>(args));
  if (on_cpu) *on_cpu = k.device == DeviceType::cpu;
  return reinterpret_cast<Fn>(k.fn);
}

}  // namespace

void matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  constexpr const char* op = op_names::matmul;
  need_dims(op, "x", x, 2, "[M, K]");
  need_dims(op, "w", w, 2, "[N, K]");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  if (w.size(1) != K)
    fail("matmul: w must be [N, K] with K = {} to match x {}, got {}", K, x.str(), w.str());
  if (bias.defined()) need_shape(op, "bias", bias, {N}, "[N] (one per output feature)");
  need_shape(op, "out", out, {M, N}, "[M, N]");
  need_writable(op, "out", out);
  auto fn = dispatch<kernels::MatmulFn>(op, tensors(x, w, bias, out));
  fn(x, w, bias, out);
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, float weight_offset) {
  constexpr const char* op = op_names::rms_norm;
  need_dims(op, "x", x, 2, "[T, D]");
  need_shape(op, "weight", weight, {x.size(1)}, "[D]");
  need_shape(op, "out", out, x.shape(), "(same as x)");
  need_writable(op, "out", out);
  if (!(eps >= 0.0f) || !std::isfinite(eps))
    fail("rms_norm: eps must be finite and >= 0, got {}", eps);
  if (!std::isfinite(weight_offset))
    fail("rms_norm: weight_offset must be finite, got {}", weight_offset);
  auto fn = dispatch<kernels::RmsNormFn>(op, tensors(x, weight, out));
  fn(x, weight, eps, out, weight_offset);
}

void rope(Tensor& x, const Tensor& positions, const Tensor& cos_sin, RopeStyle style) {
  constexpr const char* op = op_names::rope;
  need_dims(op, "x", x, 3, "[T, n_heads, head_dim]");
  need_shape(op, "positions", positions, {x.size(0)}, "[T]");
  need_dims(op, "cos_sin", cos_sin, 2, "[max_pos, rot_dim]");
  need_writable(op, "x", x);
  const int64_t rot = cos_sin.size(1), head_dim = x.size(2), max_pos = cos_sin.size(0);
  if (rot <= 0 || rot % 2 != 0 || rot > head_dim)
    fail("rope: rot_dim (cos_sin.size(1)) must be even and in 2..head_dim = {}, got {}", head_dim,
         rot);
  bool on_cpu = false;
  auto fn = dispatch<kernels::RopeFn>(op, tensors(x, positions, cos_sin), &on_cpu);
  if (on_cpu) {
    for (int64_t t = 0; t < positions.size(0); ++t) {
      const int32_t p = positions.data<const int32_t>()[t * positions.stride(0)];
      if (p < 0 || p >= max_pos)
        fail("rope: positions[{}] = {} is outside the cos/sin table [0, {})", t, p, max_pos);
    }
  }
  fn(x, positions, cos_sin, style);
}

void softmax(Tensor& x) {
  constexpr const char* op = op_names::softmax;
  need_defined(op, "x", x);
  if (x.dim() < 1) fail("softmax: x must have at least one dimension, got {}", x.str());
  need_writable(op, "x", x);
  auto fn = dispatch<kernels::SoftmaxFn>(op, tensors(x));
  fn(x);
}

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  constexpr const char* op = op_names::silu_mul;
  need_dims(op, "gate", gate, 2, "[T, F]");
  need_shape(op, "up", up, gate.shape(), "(same as gate)");
  need_shape(op, "out", out, gate.shape(), "(same as gate)");
  need_writable(op, "out", out);
  auto fn = dispatch<kernels::SiluMulFn>(op, tensors(gate, up, out));
  fn(gate, up, out);
}

void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  constexpr const char* op = op_names::gelu_tanh_mul;
  need_dims(op, "gate", gate, 2, "[T, F]");
  need_shape(op, "up", up, gate.shape(), "(same as gate)");
  need_shape(op, "out", out, gate.shape(), "(same as gate)");
  need_writable(op, "out", out);
  auto fn = dispatch<kernels::GeluTanhMulFn>(op, tensors(gate, up, out));
  fn(gate, up, out);
}

void gelu_erf_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  constexpr const char* op = op_names::gelu_erf_mul;
  need_dims(op, "gate", gate, 2, "[T, F]");
  need_shape(op, "up", up, gate.shape(), "(same as gate)");
  need_shape(op, "out", out, gate.shape(), "(same as gate)");
  need_writable(op, "out", out);
  auto fn = dispatch<kernels::GeluErfMulFn>(op, tensors(gate, up, out));
  fn(gate, up, out);
}

void scale(const Tensor& x, float s, Tensor& out) {
  constexpr const char* op = op_names::scale;
  need_defined(op, "x", x);
  need_shape(op, "out", out, x.shape(), "(same as x)");
  need_writable(op, "out", out);
  if (!std::isfinite(s)) fail("scale: the factor must be finite, got {}", s);
  auto fn = dispatch<kernels::ScaleFn>(op, tensors(x, out));
  fn(x, s, out);
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  constexpr const char* op = op_names::embedding;
  need_dims(op, "table", table, 2, "[V, D]");
  need_dims(op, "ids", ids, 1, "[T]");
  need_shape(op, "out", out, {ids.size(0), table.size(1)}, "[T, D]");
  need_writable(op, "out", out);
  bool on_cpu = false;
  auto fn = dispatch<kernels::EmbeddingFn>(op, tensors(table, ids, out), &on_cpu);
  if (on_cpu) {
    const int64_t V = table.size(0);
    for (int64_t t = 0; t < ids.size(0); ++t) {
      const int32_t id = ids.data<const int32_t>()[t * ids.stride(0)];
      if (id < 0 || id >= V)
        fail("embedding: ids[{}] = {} is out of range for a table of {} rows", t, id, V);
    }
  }
  fn(table, ids, out);
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  constexpr const char* op = op_names::add;
  need_defined(op, "a", a);
  need_shape(op, "b", b, a.shape(), "(same as a)");
  need_shape(op, "out", out, a.shape(), "(same as a)");
  need_writable(op, "out", out);
  auto fn = dispatch<kernels::AddFn>(op, tensors(a, b, out));
  fn(a, b, out);
}

void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start_pos,
               float scale, Tensor& out, int64_t window, const Tensor& sinks) {
  constexpr const char* op = op_names::attention;
  need_dims(op, "q", q, 3, "[T, n_heads, head_dim]");
  need_dims(op, "k_cache", k_cache, 3, "[max_seq, n_kv_heads, head_dim]");
  need_shape(op, "v_cache", v_cache, k_cache.shape(), "(same as k_cache)");
  need_shape(op, "out", out, q.shape(), "(same as q)");
  need_writable(op, "out", out);
  const int64_t T = q.size(0), H = q.size(1), hd = q.size(2);
  const int64_t S = k_cache.size(0), KVH = k_cache.size(1);
  if (k_cache.size(2) != hd)
    fail("attention: k_cache head_dim {} differs from q head_dim {} (q {}, k_cache {})",
         k_cache.size(2), hd, q.str(), k_cache.str());
  if (KVH <= 0 || H % KVH != 0)
    fail("attention: n_heads {} must be a multiple of n_kv_heads {}", H, KVH);
  if (start_pos < 0 || start_pos + T > S)
    fail("attention: tokens {}..{} do not fit a KV cache of {} rows", start_pos, start_pos + T, S);
  if (!std::isfinite(scale)) fail("attention: scale must be finite, got {}", scale);
  if (window < 0) fail("attention: window must be >= 0 (0: unlimited), got {}", window);
  if (sinks.defined()) need_shape(op, "sinks", sinks, {H}, "[n_heads]");
  auto fn = dispatch<kernels::AttentionFn>(op, tensors(q, k_cache, v_cache, out, sinks));
  fn(q, k_cache, v_cache, start_pos, scale, out, window, sinks);
}

}  // namespace refit::ops
