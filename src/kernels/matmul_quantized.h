// Matmul with quantized weights (FP8 e4m3fn, MXFP4, Q8_0), and the dynamic per-token
// activation quantization of W8A8. Kernels are chosen by dispatch from the tensors (law
// L3): the code dtype and layout of `w`, the dtype of `x` (f32: W8A16; f8 or i8: W8A8).
#pragma once

#include "core/tensor.h"
#include "kernels/registry.h"

namespace refit::ops {

// out[M, N] = dequant(x)[M, K] · dequant(w)[N, K]^T (+ bias[N]), where
//   x       f32 [M, K] with x_scale undefined (weights-only quantization, W8A16), or
//           f8_e4m3fn [M, K] with x_scale f32 [M] (per-token scales, W8A8), or
//           i8 [M, K] with x_scale f32 [M, K / 32] (Q8_0-style blocks; Q8_0 and MXFP4
//           weights only: exact integer block sums, kernels/cpu/matmul_int8_dot.h);
//   w       codes [N, K]: f8_e4m3fn, f4_e2m1 (packed, low nibble first) or i8, in the plain
//           (strided, contiguous) layout or shuffled_16x16 (AITER's tile shuffle of the
//           code bytes: 16 rows x 32 bytes per tile);
//   w_scale [N, S] with S = ceil(K / group): f32 for f8 codes, e8m0 for f4, f16 for i8;
//           element (n, k) uses w_scale[n, k / group]. Scales of shuffled f4/i8 codes are
//           tagged shuffled_16x16 and stored tile by tile ([N/16, S/g, 16, g], g = groups
//           per 32-byte tile); f32 scales are always plain.
//   bias    f32 [N] or undefined; out f32 [M, N] contiguous rows.
void matmul_quantized(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                      const Tensor& w_scale, int64_t group, const Tensor& bias, Tensor& out);

// xq f8_e4m3fn [M, K], x_scale f32 [M]: row m is quantized with scale amax(|x[m]|) / 448
// (nearest-even, saturating), the dynamic per-token scheme of W8A8.
void quantize_per_token_fp8(const Tensor& x, Tensor& xq, Tensor& x_scale);

// xq f8_e4m3fn [M, K], x_scale f32 [M]: every value quantized with one static scale s > 0
// (a checkpoint's input_scale, static per-tensor W8A8): xq = e4m3fn(x / s), nearest-even,
// saturating at +-448; x_scale filled with s, so matmul_quantized computes
// (xq · w^T) · s · w_scale, as vLLM's Fp8LinearOp does with a static input scale.
// A plain function over the row quantizer the weights use (quant_rows_simd.h: bit for bit
// f32_to_f8_e4m3fn(x / s)), not a registered op: there is one implementation, for f32 x on
// the cpu with dense rows, and anything else is refused naming the op and the arguments.
void quantize_fp8_with_scale(const Tensor& x, float scale, Tensor& xq, Tensor& x_scale);

// xq i8 [M, K], x_scale f32 [M, K / 32]: each block of 32 values of a row is quantized
// with scale amax / 127, codes rounded to nearest (ties to even); the activations of the
// integer-dot W8A8 schemes (q8_0-w8a8, mxfp4-w8a8), as llama.cpp quantizes them for its
// Q8_0 and MXFP4 dot products.
void quantize_per_block_q8(const Tensor& x, Tensor& xq, Tensor& x_scale);

}  // namespace refit::ops

namespace refit::kernels {
// select() args: {x, x_scale, w, w_scale, bias, out}
using MatmulQuantizedFn = void (*)(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                                   const Tensor& w_scale, int64_t group, const Tensor& bias,
                                   Tensor& out);
// select() args: {x, xq, x_scale} (also the signature of quantize_per_block_q8)
using QuantizePerTokenFn = void (*)(const Tensor& x, Tensor& xq, Tensor& x_scale);
}  // namespace refit::kernels

namespace refit::cpu {
void register_quantized_matmul_kernels(KernelRegistry& registry);
}  // namespace refit::cpu
