// Conversions between f32 and the narrow float formats, each rounding to nearest-even
// and keeping NaN a NaN. Narrowing saturates where the format has no infinity
// (f8_e4m3fn, f4_e2m1 clamp to their largest finite value, as torch's and the OCP spec's
// "satfinite" conversions do); f16, bf16 and f8_e5m2 overflow to infinity as IEEE does.
#pragma once

#include <cstdint>

namespace refit {

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float f8_e4m3fn_to_f32(uint8_t v);
uint8_t f32_to_f8_e4m3fn(float f);
float f8_e5m2_to_f32(uint8_t v);
uint8_t f32_to_f8_e5m2(float f);
float f4_e2m1_to_f32(uint8_t nibble);  // low 4 bits used
uint8_t f32_to_f4_e2m1(float f);       // returns a nibble
float e8m0_to_f32(uint8_t v);          // 2^(v-127); 0xFF is NaN
uint8_t f32_to_e8m0(float f);          // nearest power of two (ties to even exponent), clamps

}  // namespace refit
