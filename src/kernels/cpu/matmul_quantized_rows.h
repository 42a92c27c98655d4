// The dispatch rows of a family of quantized matmul kernels: one kernel per code type
// (f8 e4m3fn with f32 scales, packed f4 e2m1 with e8m0 scales, i8 with f16 scales) and
// weight layout (plain, shuffled_16x16), with the argument rules and memory-layout
// constraints every family shares. The scalar and the Highway families differ only in
// their functions, priority and a few extra limits.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/registry.h"

namespace refit::cpu {

struct QuantizedKernelFamily {
  std::string name_prefix;  // "matmul_quantized.cpu." or "matmul_quantized.cpu.hwy_"
  int priority = 10;
  bool f4_needs_k_multiple_of_32 = false;
  std::string constraint_suffix;  // appended to each row's constraint text
  // The scalar family: rows whose SIMD twin takes every input they take become reference
  // rows (Kernel::selectable false, run by name); packed f4 with K % 32 != 0 stays
  // selectable, the SIMD kernel refuses it.
  bool covered_by_simd = false;
  // Typed kernels::MatmulQuantizedFn pointers, by code type and layout.
  const void* f8_plain;
  const void* f8_shuffled;
  const void* f4_plain;
  const void* f4_shuffled;
  const void* i8_plain;
  const void* i8_shuffled;
};

void register_quantized_family(KernelRegistry& registry, const QuantizedKernelFamily& family);

// The memory-layout rules every CPU matmul_quantized kernel shares, for its arguments
// (x, x_scale, w, w_scale, bias, out): "" when met, else which one is not.
std::string dense_operands_reason(std::span<const Tensor* const> a);

// Tile t (16 rows of row_bytes) of shuffled_16x16 codes, stored as 16-row x 32-byte tiles
// each [2][16][16], written out in plain layout: out [16, row_bytes]. For kernels that
// run shuffled weights through their plain path a tile at a time (same bits as plain).
void unshuffle_code_tile(const uint8_t* codes, int64_t t, int64_t row_bytes, uint8_t* out);

}  // namespace refit::cpu
