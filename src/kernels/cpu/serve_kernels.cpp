// Dispatch-table rows for the serving path.
//
// Batch invariance (issue 8) needs every matmul row to be computed the same way whatever
// the number of rows M. The Highway kernel (matmul_cpu.cpp) has that property for f32
// weights too; OpenBLAS sgemm does not (it picks kernels and K blockings by M). So by
// default the Highway kernel is registered for f32 weights in place of OpenBLAS, making
// every f32 matmul in the process batch-invariant. REFIT_BATCH_INVARIANT=0 in the
// environment at start-up (read once, like REFIT_CPU_ISA) registers OpenBLAS (and the
// Highway decode row) instead: faster prefill, no invariance. bench/RESULTS.md records
// the cost.
#include "kernels/cpu/serve_kernels.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op_fns.h"
#include "kernels/op_names.h"
#include "kernels/paged_attention.h"

namespace refit {
namespace {

bool invariant_from_env() {
  const char* v = std::getenv("REFIT_BATCH_INVARIANT");
  return v == nullptr ||
         (std::strcmp(v, "0") != 0 && std::strcmp(v, "off") != 0 && std::strcmp(v, "false") != 0);
}

// Which arguments must be dense along their last dimension (rows) or fully contiguous.
std::function<std::string(std::span<const Tensor* const>)> dense(std::vector<size_t> rows,
                                                                 std::vector<size_t> all,
                                                                 std::vector<std::string> names) {
  return [rows, all, names](std::span<const Tensor* const> args) -> std::string {
    for (size_t i : rows) {
      const Tensor* t = i < args.size() ? args[i] : nullptr;
      if (t && t->defined() && t->dim() > 0 && t->size(-1) > 1 && t->stride(-1) != 1)
        return fmt::format("argument '{}' must have stride 1 in its last dimension, got strides {}",
                           names[i], shape_str(t->strides()));
    }
    for (size_t i : all) {
      const Tensor* t = i < args.size() ? args[i] : nullptr;
      if (t && t->defined() && !t->is_contiguous())
        return fmt::format("argument '{}' must be contiguous, got strides {}", names[i],
                           shape_str(t->strides()));
    }
    return {};
  };
}

ArgRule arg(std::string name, std::vector<DType> dtypes, bool optional = false) {
  return ArgRule{std::move(name), std::move(dtypes), {Layout::strided}, optional};
}

}  // namespace

// Read once: the registry is built once per process, from the same value.
bool batch_invariant_f32_matmul() {
  static const bool on = invariant_from_env();
  return on;
}

void register_serve_cpu_kernels(KernelRegistry& registry, bool invariant) {
  constexpr DType f32 = DType::f32, i32 = DType::i32;

  Kernel pa;
  pa.op = op_names::paged_attention;
  pa.name = "paged_attention.cpu.hwy";
  pa.device = DeviceType::cpu;
  pa.priority = 10;
  pa.args = {arg("q", {f32}),
             arg("k_pool", {f32}),
             arg("v_pool", {f32}),
             arg("block_tables", {i32}),
             arg("query_starts", {i32}),
             arg("start_positions", {i32}),
             arg("out", {f32}),
             arg("sinks", {f32}, true)};
  pa.constraint = dense(
      {0, 1, 2, 6}, {3, 4, 5, 7},
      {"q", "k_pool", "v_pool", "block_tables", "query_starts", "start_positions", "out", "sinks"});
  pa.constraint_text =
      "stride 1 along head_dim; index tensors and sinks contiguous; batch-invariant";
  pa.fn = reinterpret_cast<const void*>(
      static_cast<kernels::PagedAttentionFn>(&cpu::paged_attention_hwy));
  registry.add(std::move(pa));

  if (!invariant) return;  // OpenBLAS and the decode row take f32 weights (register.cpp)
  Kernel mm;
  mm.op = op_names::matmul;
  mm.name = "matmul.cpu.f32_invariant";
  mm.device = DeviceType::cpu;
  mm.priority = 30;  // above the layout rows (transposed, strided fallback)
  mm.args = {arg("x", {f32}), arg("w", {f32}), arg("bias", {f32}, true), arg("out", {f32})};
  mm.constraint = dense({0, 1, 3}, {2}, {"x", "w", "bias", "out"});
  mm.constraint_text =
      "Highway, batch-invariant (default; REFIT_BATCH_INVARIANT=0 registers OpenBLAS instead)";
  mm.fn = reinterpret_cast<const void*>(static_cast<kernels::MatmulFn>(&cpu::matmul_hwy));
  registry.add(std::move(mm));
}

}  // namespace refit
