// Which layout a loader should store a weight in: the one its kernel reads fastest. The
// kernel layer answers from its registered kernels (Kernel::prefers_weight_layout) and
// this CPU's features, so a model asks the registry, never a CPU kernel or the platform,
// what can run (law L3). Dispatch still picks by the tensors: a weight left plain, or
// stored in a layout no fast kernel reads on this machine, is still served correctly.
#pragma once

#include <string_view>

#include "core/tensor.h"
#include "kernels/quant/quant_scheme.h"
#include "kernels/registry.h"

namespace refit {

// Layout::strided unless a kernel of `op` on `device` that accepts `activation_dtype` as
// "x" and `weight_dtype` as "w" prefers its weight layout and can run here, for a 2-D
// weight_shape [N, K] at least as wide as it asks.
Layout preferred_weight_layout(const KernelRegistry& registry, std::string_view op,
                               DType activation_dtype, DType weight_dtype,
                               const Shape& weight_shape, DeviceType device = DeviceType::cpu);

// The same for a linear weight [N, K] of `scheme` on the CPU, through the op and dtypes its
// matmul dispatches on (matmul_quantized with the scheme's codes and activations; matmul
// of `weight_dtype` for an unquantized one), in KernelRegistry::global(). Today:
// interleaved_4x16 for q8_0-w8a8 weights with K >= 512 where AVX-512 VNNI runs.
Layout preferred_weight_layout(const QuantScheme& scheme, DType weight_dtype,
                               const Shape& weight_shape);

}  // namespace refit
