// The CPU rows of the dispatch table. Each kernel states the dtypes and layouts it
// takes per argument; shape rules common to every kernel of an op are checked once in
// kernels/ops.cpp, and the memory-layout needs of these particular kernels (which
// dimensions must be contiguous) are their constraints, so a non-contiguous view is
// refused with a reason instead of being read wrongly.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul_fp8_bf16dot.h"
#include "kernels/cpu/matmul_int8_dot.h"
#include "kernels/cpu/matmul_layouts.h"
#include "kernels/cpu/matmul_quantized_hwy.h"
#include "kernels/cpu/serve_kernels.h"
#include "kernels/matmul_quantized.h"
#include "kernels/op_fns.h"
#include "kernels/op_names.h"
#include "kernels/registry.h"

namespace refit {
namespace {

// What a kernel needs of one argument's memory layout.
enum class Dense : uint8_t {
  rows,  // last dimension has stride 1 (rows themselves may be strided)
  all,   // fully contiguous
};
struct Need {
  size_t arg;
  Dense dense;
};

bool rows_dense(const Tensor& t) { return t.dim() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1; }

// A constraint checking every `needs` entry; `names` are the op's argument names.
std::function<std::string(std::span<const Tensor* const>)> dense_constraint(
    std::vector<Need> needs, std::vector<std::string> names) {
  return [needs = std::move(needs),
          names = std::move(names)](std::span<const Tensor* const> args) -> std::string {
    for (const Need& need : needs) {
      if (need.arg >= args.size()) continue;
      const Tensor* t = args[need.arg];
      if (t == nullptr || !t->defined()) continue;
      if (need.dense == Dense::all && !t->is_contiguous())
        return fmt::format("argument '{}' must be contiguous, got shape {} strides {}",
                           names[need.arg], shape_str(t->shape()), shape_str(t->strides()));
      if (need.dense == Dense::rows && !rows_dense(*t))
        return fmt::format("argument '{}' must have stride 1 in its last dimension, got strides {}",
                           names[need.arg], shape_str(t->strides()));
    }
    return {};
  };
}

ArgRule arg(std::string name, std::vector<DType> dtypes, bool optional = false) {
  return ArgRule{std::move(name), std::move(dtypes), {Layout::strided}, optional};
}

// Argument order: the select() order documented in kernels/op_fns.h.
Kernel make(std::string op, std::string name, int priority, std::vector<ArgRule> args,
            std::vector<Need> needs, std::string constraint_text, const void* fn) {
  Kernel k;
  k.op = std::move(op);
  k.name = std::move(name);
  k.device = DeviceType::cpu;
  k.priority = priority;
  std::vector<std::string> names;
  for (const ArgRule& a : args) names.push_back(a.name);
  k.args = std::move(args);
  k.constraint = dense_constraint(std::move(needs), std::move(names));
  k.constraint_text = std::move(constraint_text);
  k.fn = fn;
  return k;
}

}  // namespace

void cpu::register_core_cpu_kernels(KernelRegistry& registry, bool f32_blas) {
  cpu::init_cpu_isa();  // REFIT_CPU_ISA applies before any kernel runs
  constexpr DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16, i32 = DType::i32;
  constexpr Dense rows = Dense::rows, all = Dense::all;

  if (f32_blas) {
    registry.add(
        make(op_names::matmul, "matmul.cpu.f32_blas", 10,
             {arg("x", {f32}), arg("w", {f32}), arg("bias", {f32}, true), arg("out", {f32})},
             {{0, rows}, {1, rows}, {2, all}, {3, rows}},
             "x, w, out: stride 1 along K/N; bias contiguous; OpenBLAS sgemm",
             kernel_fn<kernels::MatmulFn>(&cpu::matmul_f32_blas)));
    // Decode shapes: sgemm with one row runs at a fraction of memory bandwidth, the Highway
    // dot-product kernel streams the weights at full speed (bench/RESULTS.md).
    // Priority between OpenBLAS and the batch-invariant f32 kernel (serve_kernels.cpp).
    Kernel f32_decode =
        make(op_names::matmul, "matmul.cpu.f32_hwy_decode", 15,
             {arg("x", {f32}), arg("w", {f32}), arg("bias", {f32}, true), arg("out", {f32})},
             {{0, rows}, {1, rows}, {2, all}, {3, rows}},
             "M <= 4; x, w, out: stride 1 along K/N; bias contiguous",
             kernel_fn<kernels::MatmulFn>(&cpu::matmul_hwy));
    auto dense = f32_decode.constraint;
    f32_decode.constraint = [dense](std::span<const Tensor* const> args) -> std::string {
      if (args.size() > 0 && args[0] != nullptr && args[0]->defined() && args[0]->dim() == 2 &&
          args[0]->size(0) > 4)
        return fmt::format("M = {} rows; this kernel is for M <= 4", args[0]->size(0));
      return dense(args);
    };
    registry.add(std::move(f32_decode));
  }
  registry.add(
      make(op_names::matmul, "matmul.cpu.f16_bf16_hwy", 10,
           {arg("x", {f32}), arg("w", {f16, bf16}), arg("bias", {f32}, true), arg("out", {f32})},
           {{0, rows}, {1, rows}, {2, all}, {3, rows}},
           "x, w, out: stride 1 along K/N; bias contiguous; batch-invariant",
           kernel_fn<kernels::MatmulFn>(&cpu::matmul_hwy)));
  registry.add(make(op_names::rms_norm, "rms_norm.cpu.hwy", 10,
                    {arg("x", {f32}), arg("weight", {f32}), arg("out", {f32})},
                    {{0, rows}, {1, all}, {2, rows}}, "rows of x, out dense; weight contiguous",
                    kernel_fn<kernels::RmsNormFn>(&cpu::rms_norm_hwy)));
  registry.add(make(op_names::rope, "rope.cpu.hwy", 10,
                    {arg("x", {f32}), arg("positions", {i32}), arg("cos_sin", {f32})},
                    {{0, rows}, {2, rows}}, "x, cos_sin: stride 1 in the last dimension",
                    kernel_fn<kernels::RopeFn>(&cpu::rope_hwy)));
  registry.add(make(op_names::softmax, "softmax.cpu.hwy", 10, {arg("x", {f32})}, {{0, all}},
                    "x contiguous", kernel_fn<kernels::SoftmaxFn>(&cpu::softmax_hwy)));
  registry.add(make(op_names::silu_mul, "silu_mul.cpu.hwy", 10,
                    {arg("gate", {f32}), arg("up", {f32}), arg("out", {f32})},
                    {{0, rows}, {1, rows}, {2, rows}}, "stride 1 along rows (rows may be strided)",
                    kernel_fn<kernels::SiluMulFn>(&cpu::silu_mul_hwy)));
  registry.add(make(op_names::gelu_tanh_mul, "gelu_tanh_mul.cpu.hwy", 10,
                    {arg("gate", {f32}), arg("up", {f32}), arg("out", {f32})},
                    {{0, rows}, {1, rows}, {2, rows}}, "stride 1 along rows (rows may be strided)",
                    kernel_fn<kernels::GeluTanhMulFn>(&cpu::gelu_tanh_mul_hwy)));
  registry.add(make(op_names::gelu_erf_mul, "gelu_erf_mul.cpu.scalar", 10,
                    {arg("gate", {f32}), arg("up", {f32}), arg("out", {f32})},
                    {{0, rows}, {1, rows}, {2, rows}}, "stride 1 along rows (rows may be strided)",
                    kernel_fn<kernels::GeluErfMulFn>(&cpu::gelu_erf_mul_cpu)));
  registry.add(make(op_names::scale, "scale.cpu.hwy", 10, {arg("x", {f32}), arg("out", {f32})},
                    {{0, all}, {1, all}}, "all contiguous",
                    kernel_fn<kernels::ScaleFn>(&cpu::scale_hwy)));
  registry.add(make(op_names::embedding, "embedding.cpu.hwy", 10,
                    {arg("table", {f32, f16, bf16}), arg("ids", {i32}), arg("out", {f32})},
                    {{0, rows}, {2, rows}}, "table, out: stride 1 along D",
                    kernel_fn<kernels::EmbeddingFn>(&cpu::embedding_hwy)));
  registry.add(make(
      op_names::add, "add.cpu.hwy", 10, {arg("a", {f32}), arg("b", {f32}), arg("out", {f32})},
      {{0, all}, {1, all}, {2, all}}, "all contiguous", kernel_fn<kernels::AddFn>(&cpu::add_hwy)));
  registry.add(make(op_names::attention, "attention.cpu.hwy", 10,
                    {arg("q", {f32}), arg("k_cache", {f32}), arg("v_cache", {f32}),
                     arg("out", {f32}), arg("sinks", {f32}, true)},
                    {{0, rows}, {1, rows}, {2, rows}, {3, rows}, {4, all}},
                    "stride 1 along head_dim for q, k_cache, v_cache, out; sinks contiguous",
                    kernel_fn<kernels::AttentionFn>(&cpu::attention_hwy)));
  registry.add(make(op_names::moe_route, "moe_route.cpu.scalar", 10,
                    {arg("logits", {f32}), arg("ids", {i32}), arg("weights", {f32})},
                    {{0, rows}, {1, rows}, {2, rows}}, "stride 1 along E and k",
                    kernel_fn<kernels::MoeRouteFn>(&cpu::moe_route_cpu)));
  registry.add(make(op_names::moe_combine, "moe_combine.cpu.scalar", 10,
                    {arg("expert_out", {f32}), arg("weights", {f32}), arg("out", {f32})},
                    {{0, rows}, {1, rows}, {2, rows}}, "stride 1 along D and k",
                    kernel_fn<kernels::MoeCombineFn>(&cpu::moe_combine_cpu)));
  registry.add(make(op_names::swiglu_oai_mul, "swiglu_oai_mul.cpu.scalar", 10,
                    {arg("gate", {f32}), arg("up", {f32}), arg("out", {f32})},
                    {{0, all}, {1, all}, {2, all}}, "all contiguous",
                    kernel_fn<kernels::SwigluOaiMulFn>(&cpu::swiglu_oai_mul_cpu)));
}

void register_cpu_kernels(KernelRegistry& registry) {
  register_cpu_kernels(registry, batch_invariant_f32_matmul());
}

void register_cpu_kernels(KernelRegistry& registry, bool batch_invariant_f32_matmul) {
  // One family of f32 matmul rows per mode: the batch-invariant Highway row, or OpenBLAS
  // with the Highway decode row. Both at once would leave one family shadowed for every
  // input (the same constraints), rows that dispatch could never choose.
  cpu::register_core_cpu_kernels(registry, /*f32_blas=*/!batch_invariant_f32_matmul);
  register_serve_cpu_kernels(registry,
                             batch_invariant_f32_matmul);  // paged attention, invariant f32 matmul
  cpu::register_layout_matmul_kernels(registry);  // transposed / shuffled weights, fallback
  cpu::register_quantized_matmul_kernels(
      registry);  // FP8 / MXFP4 / Q8_0 weights (kernels/matmul_quantized.h)
  cpu::register_quantized_matmul_hwy_kernels(
      registry);                             // the same in SIMD, preferred where they apply
  cpu::int8dot::register_kernels(registry);  // Q8_0 / MXFP4 with int8 activations (W8A8)
  cpu::fp8dot::register_kernels(registry);   // FP8 W8A8 by bf16 dot products (AVX-512 BF16)
}

}  // namespace refit
