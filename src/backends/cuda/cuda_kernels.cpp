// The CUDA rows of the dispatch table, and the wrappers that turn the op signatures of
// kernels/op_fns.h into launches. Every row declares DeviceType::cuda, so select() only
// picks one when the argument tensors' storages are on a GPU (law L3); CPU tensors keep
// reaching the CPU kernels in a CUDA build. Shape rules are checked once by
// kernels/ops.cpp; each row's constraint states what its launch additionally needs
// (dense rows, sizes the grid can hold), so anything else is refused with a reason.
//
// Values a kernel indexes with (token ids, rope positions) are copied to the host and
// range-checked before the launch, with the CPU path's messages: a bad id must be an
// error, not an out-of-bounds read on the device.
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_launch.h"
#include "core/error.h"
#include "kernels/op_fns.h"
#include "kernels/registry.h"

namespace refit {
namespace cuda {
namespace {

// Leading dimension of a 2-D row-dense tensor for cuBLAS and the launchers: stride(0),
// or `minimum` when there is a single row (its stride(0) is never used, but cuBLAS
// validates it).
int64_t leading(const Tensor& t, int64_t minimum) {
  return t.size(0) <= 1 ? std::max<int64_t>(minimum, 1) : t.stride(0);
}

void launched(cudaError_t status, const char* op) { check(status, op); }

// Copies the (contiguous, see the registration) i32 indices `t` from the device and
// checks each lies in [0, limit); `what(i, value)` throws the op's error.
template <typename What>
void check_indices_on_host(const Tensor& t, int64_t limit, What what) {
  const int64_t n = t.numel();
  if (n == 0) return;
  std::vector<int32_t> host(static_cast<size_t>(n));
  DeviceGuard guard(t.device().index);
  check(
      cudaMemcpy(host.data(), t.raw_data(), host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost),
      "reading indices back for range checks");
  for (int64_t i = 0; i < n; ++i)
    if (host[i] < 0 || host[i] >= limit) what(i, host[i]);
}

void matmul_f32_cublas(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  if (M == 0 || N == 0) return;
  DeviceGuard guard(x.device().index);
  const int64_t ldx = leading(x, K), ldw = leading(w, K), ldo = leading(out, N);
  // Bias (or zeros when K = 0) first, then sgemm adds x · w^T into it with beta = 1.
  const bool prefill = bias.defined() || K == 0;
  if (prefill)
    launched(launch_fill_rows(out.data<float>(), ldo,
                              bias.defined() ? bias.data<const float>() : nullptr, M, N),
             "matmul bias");
  if (K == 0) return;
  // Row-major out[M, N] = x[M, K] · w[N, K]^T is column-major out^T[N, M] = w^T · x^T:
  // cuBLAS sees w as a K x N column-major matrix (op T) and x as K x M (op N).
  const float alpha = 1.0f, beta = prefill ? 1.0f : 0.0f;
  check(cublasSgemm(cublas_handle(x.device().index), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N),
                    static_cast<int>(M), static_cast<int>(K), &alpha, w.data<const float>(),
                    static_cast<int>(ldw), x.data<const float>(), static_cast<int>(ldx), &beta,
                    out.data<float>(), static_cast<int>(ldo)),
        "matmul cublasSgemm");
}

void matmul_half(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  DeviceGuard guard(x.device().index);
  launched(launch_matmul_half(x.data<const float>(), leading(x, K), w.raw_data(), leading(w, K),
                              w.dtype() == DType::f16 ? HalfType::f16 : HalfType::bf16,
                              bias.defined() ? bias.data<const float>() : nullptr,
                              out.data<float>(), leading(out, N), M, N, K),
           "matmul f16/bf16 weights");
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, float weight_offset) {
  const int64_t T = x.size(0), D = x.size(1);
  DeviceGuard guard(x.device().index);
  launched(launch_rms_norm(x.data<const float>(), leading(x, D), weight.data<const float>(), T, D,
                           eps, weight_offset, out.data<float>(), leading(out, D)),
           "rms_norm");
}

void rope(Tensor& x, const Tensor& positions, const Tensor& cos_sin, ops::RopeStyle style) {
  const int64_t max_pos = cos_sin.size(0);
  check_indices_on_host(positions, max_pos, [&](int64_t t, int32_t p) {
    fail("rope: positions[{}] = {} is outside the cos/sin table [0, {})", t, p, max_pos);
  });
  DeviceGuard guard(x.device().index);
  launched(
      launch_rope(x.data<float>(), x.stride(0), x.stride(1), x.size(0), x.size(1),
                  positions.data<const int32_t>(), positions.stride(0), cos_sin.data<const float>(),
                  cos_sin.stride(0), cos_sin.size(1), style == ops::RopeStyle::neox),
      "rope");
}

void softmax(Tensor& x) {
  const int64_t D = x.size(-1);
  if (D == 0 || x.numel() == 0) return;
  DeviceGuard guard(x.device().index);
  launched(launch_softmax(x.data<float>(), x.numel() / D, D), "softmax");
}

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  DeviceGuard guard(gate.device().index);
  launched(launch_silu_mul(gate.data<const float>(), up.data<const float>(), out.data<float>(),
                           gate.numel()),
           "silu_mul");
}

void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  DeviceGuard guard(gate.device().index);
  launched(launch_gelu_tanh_mul(gate.data<const float>(), up.data<const float>(), out.data<float>(),
                                gate.numel()),
           "gelu_tanh_mul");
}

void scale(const Tensor& x, float s, Tensor& out) {
  DeviceGuard guard(x.device().index);
  launched(launch_scale(x.data<const float>(), s, out.data<float>(), x.numel()), "scale");
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  DeviceGuard guard(a.device().index);
  launched(launch_add(a.data<const float>(), b.data<const float>(), out.data<float>(), a.numel()),
           "add");
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t V = table.size(0), D = table.size(1);
  check_indices_on_host(ids, V, [&](int64_t t, int32_t id) {
    fail("embedding: ids[{}] = {} is out of range for a table of {} rows", t, id, V);
  });
  const int table_type = table.dtype() == DType::f32   ? 0
                         : table.dtype() == DType::f16 ? static_cast<int>(HalfType::f16)
                                                       : static_cast<int>(HalfType::bf16);
  DeviceGuard guard(table.device().index);
  launched(
      launch_embedding(table.raw_data(), table_type, leading(table, D), ids.data<const int32_t>(),
                       ids.stride(0), ids.size(0), D, out.data<float>(), leading(out, D)),
      "embedding");
}

void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start_pos,
               float scale, Tensor& out, int64_t window, const Tensor& sinks) {
  AttentionArgs a{};
  a.q = q.data<const float>();
  a.q_t = q.stride(0);
  a.q_h = q.stride(1);
  a.k = k_cache.data<const float>();
  a.k_t = k_cache.stride(0);
  a.k_h = k_cache.stride(1);
  a.v = v_cache.data<const float>();
  a.v_t = v_cache.stride(0);
  a.v_h = v_cache.stride(1);
  a.out = out.data<float>();
  a.o_t = out.stride(0);
  a.o_h = out.stride(1);
  a.T = q.size(0);
  a.H = q.size(1);
  a.KVH = k_cache.size(1);
  a.head_dim = q.size(2);
  a.start_pos = start_pos;
  a.window = window;
  a.scale = scale;
  a.sinks = sinks.defined() ? sinks.data<const float>() : nullptr;
  a.sink_h = sinks.defined() ? sinks.stride(0) : 0;
  DeviceGuard guard(q.device().index);
  launched(launch_attention(a), "attention");
}

// ---- registration ----

bool rows_dense(const Tensor& t) { return t.dim() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1; }

// The constraint every CUDA row shares: arguments listed in `rows` need stride 1 in
// their last dimension and, when 2-D or more, rows that do not overlap; those in
// `contiguous` must be contiguous; `extra` adds an op's own limits.
using Extra = std::function<std::string(std::span<const Tensor* const>)>;
std::function<std::string(std::span<const Tensor* const>)> constraint(
    std::vector<std::string> names, std::vector<size_t> rows, std::vector<size_t> contiguous,
    Extra extra = nullptr) {
  return [=](std::span<const Tensor* const> args) -> std::string {
    for (size_t i : rows) {
      const Tensor* t = i < args.size() ? args[i] : nullptr;
      if (!t || !t->defined()) continue;
      if (!rows_dense(*t))
        return fmt::format("argument '{}' must have stride 1 in its last dimension, got strides {}",
                           names[i], shape_str(t->strides()));
      if (t->dim() == 2 && t->size(0) > 1 && t->stride(0) < t->size(1))
        return fmt::format("argument '{}' has overlapping rows (strides {})", names[i],
                           shape_str(t->strides()));
    }
    for (size_t i : contiguous) {
      const Tensor* t = i < args.size() ? args[i] : nullptr;
      if (t && t->defined() && !t->is_contiguous())
        return fmt::format("argument '{}' must be contiguous, got shape {} strides {}", names[i],
                           shape_str(t->shape()), shape_str(t->strides()));
    }
    return extra ? extra(args) : std::string();
  };
}

Kernel make(std::string op, std::string name, std::vector<ArgRule> args,
            std::function<std::string(std::span<const Tensor* const>)> limits,
            std::string constraint_text, const void* fn) {
  Kernel k;
  k.op = std::move(op);
  k.name = std::move(name);
  k.device = DeviceType::cuda;
  k.priority = 10;
  k.args = std::move(args);
  k.constraint = std::move(limits);
  k.constraint_text = std::move(constraint_text);
  k.fn = fn;
  return k;
}

ArgRule arg(std::string name, std::vector<DType> dtypes, bool optional = false) {
  return ArgRule{std::move(name), std::move(dtypes), {Layout::strided}, optional};
}

// cuBLAS takes int sizes and leading dimensions.
std::string matmul_fits_int(std::span<const Tensor* const> args) {
  for (const Tensor* t : args) {
    if (!t || !t->defined()) continue;
    for (int64_t d = 0; d < t->dim(); ++d)
      if (t->size(d) > INT_MAX || t->stride(d) > INT_MAX)
        return fmt::format("sizes and strides must fit in int for cuBLAS, got {}", t->str());
  }
  return {};
}

std::string attention_fits(std::span<const Tensor* const> args) {
  const Tensor& q = *args[0];
  if (q.size(2) > kAttentionMaxHeadDim)
    return fmt::format("head_dim {} exceeds {}", q.size(2), kAttentionMaxHeadDim);
  if (q.size(1) > 65535) return fmt::format("{} query heads exceed 65535", q.size(1));
  if (q.size(0) > INT_MAX) return fmt::format("{} tokens exceed 2^31 - 1", q.size(0));
  return {};
}

std::string half_matmul_fits(std::span<const Tensor* const> args) {
  if (args[1]->size(0) > int64_t{INT_MAX} * 4)
    return fmt::format("N = {} exceeds the grid", args[1]->size(0));
  return {};
}

}  // namespace
}  // namespace cuda

void register_cuda_kernels(KernelRegistry& registry) {
  using namespace cuda;
  constexpr DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16, i32 = DType::i32;
  const std::vector<std::string> mm = {"x", "w", "bias", "out"};
  registry.add(make("matmul", "matmul.cuda.f32_cublas",
                    {arg("x", {f32}), arg("w", {f32}), arg("bias", {f32}, true), arg("out", {f32})},
                    constraint(mm, {0, 1, 3}, {2}, matmul_fits_int),
                    "x, w, out: stride 1 along K/N; bias contiguous; cuBLAS sgemm, no TF32",
                    kernel_fn<kernels::MatmulFn>(&cuda::matmul_f32_cublas)));
  registry.add(
      make("matmul", "matmul.cuda.f16_bf16_warp",
           {arg("x", {f32}), arg("w", {f16, bf16}), arg("bias", {f32}, true), arg("out", {f32})},
           constraint(mm, {0, 1, 3}, {2}, half_matmul_fits),
           "x, w, out: stride 1 along K/N; bias contiguous; f32 accumulate",
           kernel_fn<kernels::MatmulFn>(&cuda::matmul_half)));
  registry.add(make(
      "rms_norm", "rms_norm.cuda.block", {arg("x", {f32}), arg("weight", {f32}), arg("out", {f32})},
      constraint({"x", "weight", "out"}, {0, 2}, {1}), "rows of x, out dense; weight contiguous",
      kernel_fn<kernels::RmsNormFn>(&cuda::rms_norm)));
  registry.add(make(
      "rope", "rope.cuda.block", {arg("x", {f32}), arg("positions", {i32}), arg("cos_sin", {f32})},
      constraint({"x", "positions", "cos_sin"}, {0, 2}, {1}),
      "x, cos_sin: stride 1 in the last dimension; positions contiguous, range-checked on the host",
      kernel_fn<kernels::RopeFn>(&cuda::rope)));
  registry.add(make("softmax", "softmax.cuda.block", {arg("x", {f32})}, constraint({"x"}, {}, {0}),
                    "x contiguous", kernel_fn<kernels::SoftmaxFn>(&cuda::softmax)));
  registry.add(make("silu_mul", "silu_mul.cuda.elementwise",
                    {arg("gate", {f32}), arg("up", {f32}), arg("out", {f32})},
                    constraint({"gate", "up", "out"}, {}, {0, 1, 2}), "all contiguous",
                    kernel_fn<kernels::SiluMulFn>(&cuda::silu_mul)));
  registry.add(make("embedding", "embedding.cuda.block",
                    {arg("table", {f32, f16, bf16}), arg("ids", {i32}), arg("out", {f32})},
                    constraint({"table", "ids", "out"}, {0, 2}, {1}),
                    "table, out: stride 1 along D; ids contiguous, range-checked on the host",
                    kernel_fn<kernels::EmbeddingFn>(&cuda::embedding)));
  registry.add(make("gelu_tanh_mul", "gelu_tanh_mul.cuda.elementwise",
                    {arg("gate", {f32}), arg("up", {f32}), arg("out", {f32})},
                    constraint({"gate", "up", "out"}, {}, {0, 1, 2}), "all contiguous",
                    kernel_fn<kernels::GeluTanhMulFn>(&cuda::gelu_tanh_mul)));
  registry.add(make("scale", "scale.cuda.elementwise", {arg("x", {f32}), arg("out", {f32})},
                    constraint({"x", "out"}, {}, {0, 1}), "all contiguous",
                    kernel_fn<kernels::ScaleFn>(&cuda::scale)));
  registry.add(make("add", "add.cuda.elementwise",
                    {arg("a", {f32}), arg("b", {f32}), arg("out", {f32})},
                    constraint({"a", "b", "out"}, {}, {0, 1, 2}), "all contiguous",
                    kernel_fn<kernels::AddFn>(&cuda::add)));
  registry.add(make(
      "attention", "attention.cuda.online_softmax",
      {arg("q", {f32}), arg("k_cache", {f32}), arg("v_cache", {f32}), arg("out", {f32}),
       arg("sinks", {f32}, true)},
      constraint({"q", "k_cache", "v_cache", "out", "sinks"}, {0, 1, 2, 3}, {}, attention_fits),
      "stride 1 along head_dim; head_dim <= 256",
      kernel_fn<kernels::AttentionFn>(&cuda::attention)));
}

}  // namespace refit
