// Matmul kernels for kernel-specific weight layouts (transposed, shuffled_16x16) and a
// plain strided fallback; see matmul_layouts.cpp.
#pragma once

#include "kernels/registry.h"

namespace refit::cpu {
void register_layout_matmul_kernels(KernelRegistry& registry);
}  // namespace refit::cpu
