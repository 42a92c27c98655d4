// FP8 W8A8 (e4m3 weights and per-token e4m3 activations, "fp8-*-w8a8") on AVX-512 BF16:
// every e4m3 value is exactly a bf16 value (4-bit significand, exponents 2^-9..2^8, all
// normal in bf16), so both operands become bf16 without rounding and vdpbf16ps multiplies
// 32 pairs per instruction, each product exact in f32 (8-bit significands), summed in f32.
// The f32 path it replaces spends 4-5 instructions per 16 weights decoding codes to f32;
// here a 64-code vector becomes bf16 by two 128-entry byte lookups (vpermi2b, AVX-512 VBMI).
//
// Numerics: the products are the f32 path's exactly; only the order and rounding of the
// f32 sums differ, so results agree with dequantize-then-matmul to ~1e-6 relative, as the
// f32 path does. vdpbf16ps reads denormal inputs as zero: none occur (codes are never
// denormal as bf16, and scales are applied after the sums), and no sum of products of
// codes (multiples of 2^-18) is denormal. Rows of a batch never interact and every M runs
// this same kernel, so a row's result does not depend on M (batch invariance); a shuffled
// weight is read in place, its 16-byte pieces re-assembled in registers, with the plain layout's
// bits.
//
// Per output element: acc (16 lanes) over each scale group of 128 values (or the whole row
// when one scale covers it) by vdpbf16ps, then out += lanes(acc) * w_scale per group, in
// f32 lanes, a fixed tree over the lanes, times the token's scale, plus bias.
#pragma once

#include <cstdint>

#include "kernels/registry.h"

namespace refit::cpu::fp8dot {

// Whether the kernel may run: the CPU has AVX-512 BF16 and VBMI and REFIT_CPU_ISA allows avx3.
bool usable();
bool on_cpu();  // the CPU has them (REFIT_CPU_ISA aside)

struct Operands {
  int64_t M, K, N, group, S;  // group: K (one scale per row) or a multiple of 64
  int64_t Kp;                 // K rounded up to 64
  const uint16_t* xb;         // [M, Kp] activation codes as bf16, in vector order (see kernel)
  const float* xs;            // [M] per-token scales
  const uint8_t* bf16_low;    // [128] low / high bytes of the bf16 bits of magnitude codes 0..127
  const uint8_t* bf16_high;
  const float* w_scale;  // [N, S]
  const float* bias;     // [N] or null
  float* out;            // [M, N], rows ldo apart
  int64_t ldo;
};

// The activations' bf16 values in the order the kernel pairs them with weight codes.
void prepare_activations(const uint8_t* x_codes, int64_t ldx, int64_t M, int64_t K, int64_t Kp,
                         uint16_t* xb);
// Output columns [n0, n0 + rows) for every activation row; codes [rows, K] rows K apart.
void rows_avx512(const Operands& op, const uint8_t* codes, int64_t n0, int64_t rows,
                 const uint8_t* next);
// Output columns [n0, n0 + 16) from a 16-row tile stored shuffled (16 x K bytes), read in
// place with the plain layout's bits; `next`: the next tile, to prefetch (or null).
void shuffled_tile_avx512(const Operands& op, const uint8_t* tile, int64_t n0, const uint8_t* next);

void register_kernels(KernelRegistry& registry);

}  // namespace refit::cpu::fp8dot
