// Bulk conversions between f32 and the 16-bit float formats for contiguous arrays, bit-identical
// to the scalar f32_to_f16 / f32_to_bf16 / f16_to_f32 / bf16_to_f32 (core/float_formats.h):
// round to nearest even, NaNs as the scalar functions make them. Tensor::copy_from uses them;
// they are what a weight update runs when a trainer sends f32 to a bf16/f16 engine (or the
// reverse), so they must run near memory speed: F16C for f16 (any block holding a NaN goes
// through the scalar function), integer arithmetic the compiler vectorises for bf16.
#pragma once

#include <cstdint>

namespace refit {

void convert_f32_to_f16(const float* in, uint16_t* out, int64_t n);
void convert_f16_to_f32(const uint16_t* in, float* out, int64_t n);
void convert_f32_to_bf16(const float* in, uint16_t* out, int64_t n);
void convert_bf16_to_f32(const uint16_t* in, float* out, int64_t n);

// True when the f16 conversions use F16C on this CPU (else the scalar functions).
bool float_convert_uses_f16c();

}  // namespace refit
