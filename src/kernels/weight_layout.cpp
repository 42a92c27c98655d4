#include "kernels/weight_layout.h"

#include <algorithm>

#include "kernels/op_names.h"

namespace refit {
namespace {

bool accepts_dtype(const Kernel& kernel, std::string_view arg, DType dtype) {
  for (const ArgRule& rule : kernel.args)
    if (rule.name == arg)
      return rule.dtypes.empty() ||
             std::find(rule.dtypes.begin(), rule.dtypes.end(), dtype) != rule.dtypes.end();
  return false;
}

Layout weight_layout_of(const Kernel& kernel) {
  for (const ArgRule& rule : kernel.args)
    if (rule.name == "w" && !rule.layouts.empty()) return rule.layouts.front();
  return Layout::strided;
}

}  // namespace

Layout preferred_weight_layout(const KernelRegistry& registry, std::string_view op,
                               DType activation_dtype, DType weight_dtype,
                               const Shape& weight_shape, DeviceType device) {
  if (weight_shape.size() != 2) return Layout::strided;
  // Highest priority first (kernels() keeps the registry's order), as dispatch would try them.
  for (const Kernel* kernel : registry.kernels(op)) {
    if (kernel->device != device || !kernel->selectable || !kernel->prefers_weight_layout) continue;
    const Kernel::WeightLayoutPreference& preference = *kernel->prefers_weight_layout;
    if (!accepts_dtype(*kernel, "x", activation_dtype) ||
        !accepts_dtype(*kernel, "w", weight_dtype))
      continue;
    if (weight_shape[1] < preference.min_weight_cols) continue;
    if (preference.usable && !preference.usable()) continue;
    return weight_layout_of(*kernel);
  }
  return Layout::strided;
}

Layout preferred_weight_layout(const QuantScheme& scheme, DType weight_dtype,
                               const Shape& weight_shape) {
  const KernelRegistry& registry = KernelRegistry::global();
  if (!scheme.enabled())
    return preferred_weight_layout(registry, op_names::matmul, DType::f32, weight_dtype,
                                   weight_shape);
  const DType activations = !scheme.w8a8                ? DType::f32
                            : scheme.int8_activations() ? DType::i8
                                                        : DType::f8_e4m3fn;
  return preferred_weight_layout(registry, op_names::matmul_quantized, activations,
                                 scheme.code_dtype(), weight_shape);
}

}  // namespace refit
