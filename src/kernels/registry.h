// Kernel registry and dispatch (law L3: kernels are chosen by the actual tensors).
//
// Each op ("matmul", "rms_norm", ...) has a table of kernels. A kernel declares the
// device type it runs on, per argument the dtypes and layouts it accepts, optional
// extra constraints (e.g. "K % 32 == 0") and a priority. select() is a pure function of
// the argument tensors: it never looks at the build, the platform or global state.
// When nothing fits it throws DispatchError naming the op, every argument's
// device/dtype/layout/shape, and every candidate with the reason it was rejected.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace refit {

struct ArgRule {
  std::string name;             // "x", "weight", "bias", ...
  std::vector<DType> dtypes;    // accepted dtypes; empty means any
  std::vector<Layout> layouts;  // accepted layouts; empty means {strided}
  bool optional = false;        // may be an undefined Tensor (e.g. no bias)
};

struct Kernel {
  std::string op;    // "matmul"
  std::string name;  // "matmul.cpu.f32_blas"
  DeviceType device = DeviceType::cpu;
  int priority = 0;  // highest accepted wins
  std::vector<ArgRule> args;
  // Extra limits on shapes/strides. Returns "" when accepted, else why not.
  std::function<std::string(std::span<const Tensor* const>)> constraint;
  std::string constraint_text;  // shown by `refit kernels`, e.g. "K % 32 == 0"
  const void* fn = nullptr;     // the op's typed function pointer (see kernels/ops.h)
  // Set on a kernel that reads its weight (argument "w") faster in the layout it accepts
  // than other kernels read the plain one, so that a loader stores weights in that layout
  // where this kernel will run (preferred_weight_layout, kernels/weight_layout.h). Dispatch
  // ignores it: selection stays a function of the tensors.
  struct WeightLayoutPreference {
    std::function<bool()> usable;  // this CPU and REFIT_CPU_ISA let the kernel run
    int64_t min_weight_cols = 0;   // narrower weights gain nothing (e.g. the same bytes)
  };
  std::optional<WeightLayoutPreference> prefers_weight_layout{};
  // What this machine's CPU lacks to run the kernel at all ("" when it can), whatever
  // REFIT_CPU_ISA caps: the constraint refuses such a row every input, and the registry walk
  // (tests/unit/kernels_registry_walk_test.cpp) skips it, saying so, on such machines.
  std::function<std::string()> cpu_lacks;
  // false: a reference row, looked up by name (tests, benchmarks) and never chosen by
  // select(), for a kernel that a higher row takes over for every input it accepts.
  bool selectable = true;
};

// A kernel function as Kernel::fn stores it: kernel_fn<kernels::MatmulFn>(&f). Naming the
// op's function type (kernels/op_fns.h) makes a function of another signature not compile.
template <typename Fn>
const void* kernel_fn(Fn f) {
  return reinterpret_cast<const void*>(f);
}

class KernelRegistry {
 public:
  // The process-wide registry with every built-in kernel (CPU always; CUDA when built).
  static KernelRegistry& global();
  KernelRegistry() = default;

  void add(Kernel kernel);
  const Kernel& select(std::string_view op, std::span<const Tensor* const> args) const;
  // Why `kernel` rejects `args` ("" if it accepts them).
  static std::string rejection_reason(const Kernel& kernel, std::span<const Tensor* const> args);
  std::vector<const Kernel*> kernels(std::string_view op = {}) const;
  // Human-readable table: op | kernel | device | priority | args | constraints.
  std::string table() const;

 private:
  std::vector<Kernel> kernels_;
};

// Registration entry points (explicit, so a static library never drops them). The f32
// matmul rows follow REFIT_BATCH_INVARIANT (read once, kernels/cpu/serve_kernels.h); the
// second form builds the table of either mode.
void register_cpu_kernels(KernelRegistry& registry);
void register_cpu_kernels(KernelRegistry& registry, bool batch_invariant_f32_matmul);
// An optional backend built beside the kernels (src/backends/cuda/) hands over the
// function that adds its rows, from a static initialiser while the program starts;
// global() adds them after the CPU rows (at once when global() already exists). The
// kernel layer thus names no backend, and a build without one simply has no such rows.
void register_backend_kernels(void (*add_rows)(KernelRegistry& registry));

}  // namespace refit
