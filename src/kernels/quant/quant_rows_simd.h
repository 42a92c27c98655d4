// SIMD quantization of one row at a time (Highway, compiled per ISA and chosen at run time
// as the CPU kernels are: cpu::init_cpu_isa, REFIT_CPU_ISA). Each function produces the
// bytes kernels/quant/quant_reference.cpp produces for the same row, bit for bit, under every
// ISA: only exactly rounded IEEE operations (multiply, divide, round-to-integer) and
// integer bit arithmetic are used, in the order the scalar code rounds.
// kernels/quant/quantize.cpp drives them over rows and threads.
#pragma once

#include <cstdint>

namespace refit::quant_simd {

// amax[g] = max |x[c]| over the columns c of group g = [g * group, min(k, (g + 1) * group)),
// NaNs skipped (as std::max(amax, NaN) keeps amax), 0 for an empty or all-NaN group.
void group_amax(const float* x, int64_t k, int64_t group, float* amax);

// codes[c] = f32_to_f8_e4m3fn(x[c] / scale[c / group]) for c in [0, k).
void fp8_row(const float* x, int64_t k, int64_t group, const float* scale, uint8_t* codes);

// One MXFP4 row (k % 32 == 0): codes k / 2 bytes (low nibble first), scales k / 32 e8m0
// bytes. `scratch` holds k bytes (one unpacked code per byte).
void mxfp4_row(const float* x, int64_t k, uint8_t* codes, uint8_t* scales, uint8_t* scratch);

// One Q8_0 row (k % 32 == 0): codes k int8, d[k / 32] the f32 block scales before their
// rounding to f16 (the caller converts them in bulk).
void q8_0_row(const float* x, int64_t k, int8_t* codes, float* d);

}  // namespace refit::quant_simd
