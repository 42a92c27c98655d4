// Highway SIMD kernels for matmul_quantized (kernels/matmul_quantized.h): FP8, MXFP4 and
// Q8_0 weights in the plain and shuffled_16x16 layouts, registered above the scalar
// kernels of matmul_quantized_cpu.cpp (which take the shapes these refuse).
#pragma once

#include "kernels/registry.h"

namespace refit::cpu {
void register_quantized_matmul_hwy_kernels(KernelRegistry& registry);
}  // namespace refit::cpu
