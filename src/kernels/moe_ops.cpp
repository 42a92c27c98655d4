// Entry points of the mixture-of-experts ops (ops.h): shape checks once, then the kernel
// the registry selects for these tensors.
#include <fmt/format.h>

#include <array>
#include <cmath>

#include "core/error.h"
#include "kernels/op_fns.h"
#include "kernels/op_names.h"
#include "kernels/ops.h"

namespace refit::ops {
namespace {

void need(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  if (!t.defined()) fail("{}: argument '{}' is an undefined tensor", op, name);
  if (t.shape() != shape)
    fail("{}: '{}' must have shape {}, got {}", op, name, shape_str(shape), t.str());
}

void need_writable(const char* op, const char* name, const Tensor& t) {
  if (t.read_only()) fail("{}: output '{}' is read-only ({})", op, name, t.str());
}

template <typename Fn, size_t N>
Fn dispatch(const char* op, const std::array<const Tensor*, N>& args) {
  const Kernel& k = KernelRegistry::global().select(op, std::span<const Tensor* const>(args));
  return reinterpret_cast<Fn>(k.fn);
}

}  // namespace

void moe_route(const Tensor& logits, int64_t k, RouterScoring scoring, bool renormalize,
               Tensor& ids, Tensor& weights) {
  constexpr const char* op = op_names::moe_route;
  if (!logits.defined() || logits.dim() != 2)
    fail("{}: 'logits' must be 2-D [T, E], got {}", op, logits.defined() ? logits.str() : "none");
  const int64_t T = logits.size(0), E = logits.size(1);
  if (k < 1 || k > E) fail("{}: k = {} must be in 1..{} (the number of experts)", op, k, E);
  need(op, "ids", ids, {T, k});
  need(op, "weights", weights, {T, k});
  need_writable(op, "ids", ids);
  need_writable(op, "weights", weights);
  auto fn =
      dispatch<kernels::MoeRouteFn>(op, std::array<const Tensor*, 3>{&logits, &ids, &weights});
  fn(logits, k, scoring, renormalize, ids, weights);
}

void moe_combine(const Tensor& expert_out, const Tensor& weights, Tensor& out) {
  constexpr const char* op = op_names::moe_combine;
  if (!expert_out.defined() || expert_out.dim() != 3)
    fail("{}: 'expert_out' must be 3-D [T, k, D], got {}", op,
         expert_out.defined() ? expert_out.str() : "none");
  const int64_t T = expert_out.size(0), k = expert_out.size(1), D = expert_out.size(2);
  need(op, "weights", weights, {T, k});
  need(op, "out", out, {T, D});
  need_writable(op, "out", out);
  auto fn = dispatch<kernels::MoeCombineFn>(
      op, std::array<const Tensor*, 3>{&expert_out, &weights, &out});
  fn(expert_out, weights, out);
}

void swiglu_oai_mul(const Tensor& gate, const Tensor& up, float alpha, float limit, Tensor& out) {
  constexpr const char* op = op_names::swiglu_oai_mul;
  if (!gate.defined() || gate.dim() != 2)
    fail("{}: 'gate' must be 2-D [T, F], got {}", op, gate.defined() ? gate.str() : "none");
  need(op, "up", up, gate.shape());
  need(op, "out", out, gate.shape());
  need_writable(op, "out", out);
  if (!std::isfinite(alpha) || !(limit > 0))
    fail("{}: alpha must be finite and limit > 0, got alpha {} limit {}", op, alpha, limit);
  auto fn = dispatch<kernels::SwigluOaiMulFn>(op, std::array<const Tensor*, 3>{&gate, &up, &out});
  fn(gate, up, alpha, limit, out);
}

}  // namespace refit::ops
