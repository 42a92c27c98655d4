// Argument checks and dispatch for the quantized matmul ops (see matmul_quantized.h).
#include "kernels/matmul_quantized.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

#include "core/error.h"
#include "kernels/op_names.h"
#include "kernels/quant/quant_rows_simd.h"

namespace refit::ops {
namespace {

// `what` is a callable that builds the message: the checks run on every decode step, and
// formatting a message that is not needed cost more than the checks themselves.
template <typename What>
void need(bool ok, const char* op, What&& what) {
  if (!ok) fail("{}: {}", op, std::string(what()));
}
void need(bool ok, const char* op, const char* what) {
  if (!ok) fail("{}: {}", op, what);
}

template <typename Fn, size_t N>
Fn dispatch(const char* op, const std::array<const Tensor*, N>& args) {
  const Kernel& k = KernelRegistry::global().select(op, std::span<const Tensor* const>(args));
  return reinterpret_cast<Fn>(k.fn);
}

}  // namespace

void matmul_quantized(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                      const Tensor& w_scale, int64_t group, const Tensor& bias, Tensor& out) {
  constexpr const char* op = op_names::matmul_quantized;
  need(x.defined() && x.dim() == 2, op, [&] {
    return fmt::format("'x' must be 2-D [M, K], got {}", x.defined() ? x.str() : "undefined");
  });
  need(w.defined() && w.dim() == 2, op, [&] {
    return fmt::format("'w' must be 2-D [N, K] codes, got {}", w.defined() ? w.str() : "undefined");
  });
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  need(w.size(1) == K, op, [&] {
    return fmt::format("'w' must be [N, K] with K = {} to match x {}, got {}", K, x.str(), w.str());
  });
  need(group > 0, op, [&] { return fmt::format("group must be positive, got {}", group); });
  const int64_t S = (K + group - 1) / group;
  need(w_scale.defined() && w_scale.shape() == Shape{N, S}, op, [&] {
    return fmt::format("'w_scale' must be [N, ceil(K / {})] = [{}, {}], got {}", group, N, S,
                       w_scale.defined() ? w_scale.str() : "undefined");
  });
  if (x.dtype() == DType::i8) {
    need(K % 32 == 0 && group == 32, op, [&] {
      return fmt::format(
          "int8 activations need K % 32 == 0 and weight groups of 32, got K {} group {}", K, group);
    });
    need(x_scale.defined() && x_scale.shape() == Shape{M, K / 32}, op, [&] {
      return fmt::format("'x_scale' must be [M, K / 32] = [{}, {}] for int8 activations, got {}", M,
                         K / 32, x_scale.defined() ? x_scale.str() : "undefined");
    });
  } else if (x_scale.defined()) {
    need(x_scale.shape() == Shape{M}, op,
         [&] { return fmt::format("'x_scale' must be [M] = [{}], got {}", M, x_scale.str()); });
  }
  if (bias.defined())
    need(bias.shape() == Shape{N}, op,
         [&] { return fmt::format("'bias' must be [{}], got {}", N, bias.str()); });
  need(out.defined() && out.shape() == Shape{M, N}, op, [&] {
    return fmt::format("'out' must be [{}, {}], got {}", M, N,
                       out.defined() ? out.str() : "undefined");
  });
  need(!out.read_only(), op, "output 'out' is read-only");
  auto fn = dispatch<kernels::MatmulQuantizedFn>(
      op, std::array<const Tensor*, 6>{&x, &x_scale, &w, &w_scale, &bias, &out});
  fn(x, x_scale, w, w_scale, group, bias, out);
}

void quantize_per_token_fp8(const Tensor& x, Tensor& xq, Tensor& x_scale) {
  constexpr const char* op = op_names::quantize_per_token_fp8;
  need(x.defined() && x.dim() == 2, op, "'x' must be 2-D [M, K]");
  need(xq.defined() && xq.shape() == x.shape(), op,
       [&] { return fmt::format("'xq' must be {}", shape_str(x.shape())); });
  need(x_scale.defined() && x_scale.shape() == Shape{x.size(0)}, op, "'x_scale' must be [M]");
  need(!xq.read_only() && !x_scale.read_only(), op, "outputs are read-only");
  auto fn =
      dispatch<kernels::QuantizePerTokenFn>(op, std::array<const Tensor*, 3>{&x, &xq, &x_scale});
  fn(x, xq, x_scale);
}

void quantize_fp8_with_scale(const Tensor& x, float scale, Tensor& xq, Tensor& x_scale) {
  constexpr const char* op = "quantize_fp8_with_scale";
  need(x.defined() && x.dim() == 2 && x.dtype() == DType::f32 && x.stride(-1) == 1 &&
           x.device().type == DeviceType::cpu,
       op, [&] {
         return fmt::format("'x' must be f32 [M, K] on the cpu with dense rows, got {}",
                            x.defined() ? x.str() : "undefined");
       });
  need(xq.defined() && xq.shape() == x.shape() && xq.dtype() == DType::f8_e4m3fn &&
           xq.is_contiguous() && xq.device().type == DeviceType::cpu,
       op, [&] {
         return fmt::format("'xq' must be contiguous f8_e4m3fn {} on the cpu, got {}",
                            shape_str(x.shape()), xq.defined() ? xq.str() : "undefined");
       });
  need(x_scale.defined() && x_scale.shape() == Shape{x.size(0)} && x_scale.dtype() == DType::f32 &&
           x_scale.is_contiguous() && x_scale.device().type == DeviceType::cpu,
       op, [&] {
         return fmt::format("'x_scale' must be contiguous f32 [{}] on the cpu, got {}", x.size(0),
                            x_scale.defined() ? x_scale.str() : "undefined");
       });
  need(std::isfinite(scale) && scale > 0.0f, op,
       [&] { return fmt::format("the scale must be finite and positive, got {}", scale); });
  need(!xq.read_only() && !x_scale.read_only(), op, "outputs are read-only");
  const int64_t M = x.size(0), K = x.size(1);
  auto* q = static_cast<uint8_t*>(xq.raw_data());
  float* s = x_scale.data<float>();
  for (int64_t m = 0; m < M; ++m) {
    s[m] = scale;
    quant_simd::fp8_row(x.data<const float>() + m * x.stride(0), K, K, &scale, q + m * K);
  }
}

void quantize_per_block_q8(const Tensor& x, Tensor& xq, Tensor& x_scale) {
  constexpr const char* op = op_names::quantize_per_block_q8;
  need(x.defined() && x.dim() == 2 && x.size(1) % 32 == 0, op, [&] {
    return fmt::format("'x' must be 2-D [M, K] with K % 32 == 0, got {}",
                       x.defined() ? x.str() : "undefined");
  });
  need(xq.defined() && xq.shape() == x.shape(), op,
       [&] { return fmt::format("'xq' must be {}", shape_str(x.shape())); });
  need(x_scale.defined() && x_scale.shape() == Shape{x.size(0), x.size(1) / 32}, op,
       [&] { return fmt::format("'x_scale' must be [{}, {}]", x.size(0), x.size(1) / 32); });
  need(!xq.read_only() && !x_scale.read_only(), op, "outputs are read-only");
  auto fn =
      dispatch<kernels::QuantizePerTokenFn>(op, std::array<const Tensor*, 3>{&x, &xq, &x_scale});
  fn(x, xq, x_scale);
}

}  // namespace refit::ops
