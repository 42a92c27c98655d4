// Quantizing one sub-shard's rows fast: SIMD row kernels (quant_rows_simd.h) run over
// rows on the thread pool, reading the source tensor in its own dtype (f16/bf16 rows are
// widened to f32 one row at a time, in cache, instead of through an f32 copy of the
// whole tensor) and writing codes and scales straight to their final place, in the plain
// or a kernel layout (shuffled_16x16, interleaved_4x16). The bytes are those of
// quantize_rows_reference (quant_reference.h) followed, when shuffled, by shuffle_16x16 on
// the codes and shuffle_scales_16 on the scales, when interleaved by interleave_4x16 on the
// codes: the same for every thread count and every ISA.
#pragma once

#include <cstdint>
#include <functional>

#include "core/tensor.h"
#include "kernels/quant/quant_scheme.h"

namespace refit {

// rows: [n, k] of f32, f16, bf16 or f64, on the CPU, any strides. codes: n *
// code_row_bytes(scheme, k) bytes; scales: [n, scale_cols(k)] of scheme.scale_dtype().
// `layout`: strided (plain), shuffled_16x16 (needs n % 16 == 0 and code rows of a multiple
// of 32 bytes) or interleaved_4x16 (1-byte codes: Q8_0); the parameter checked these when
// it took the transform. Runs parallel_for itself (inline when already inside one).
void quantize_tensor(const QuantScheme& scheme, const Tensor& rows, void* codes, void* scales,
                     Layout layout);

// Row r of codes already made (a checkpoint's pre-quantized blocks): writes its
// code_row_bytes(scheme, k) code bytes and scale_cols(k) scales, plain, to the two pointers.
// Called from several threads at once.
using CodeRowFn = std::function<void(int64_t r, uint8_t* codes, uint8_t* scales)>;

// n such rows placed in `layout` exactly as quantize_tensor places the rows it quantizes
// (same constraints), so storing a checkpoint's codes and quantizing its decoded values
// write the parameter the same way.
void store_code_rows(const QuantScheme& scheme, int64_t n, int64_t k, const CodeRowFn& row,
                     void* codes, void* scales, Layout layout);

}  // namespace refit
