// Narrow float formats. One generic rounding routine serves every format with a
// sign/exponent/mantissa layout: scale |f| so that one unit in the last place of the
// target is 1.0, round to the nearest integer with ties to even (rint in the default
// rounding mode), then encode the now exactly representable value. Scaling by a power
// of two is exact in f32, so the only rounding is the one we ask for.
#include "core/float_formats.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace refit {
namespace {

struct MiniFloat {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_inf;         // IEEE-style: all-ones exponent is inf/NaN (f16, e5m2)
  uint32_t max_finite;  // magnitude code of the largest finite value
  uint32_t nan_code;    // magnitude code used for NaN (ignored if no NaN exists)
  bool has_nan;
};

constexpr MiniFloat kF16{5, 10, 15, true, 0x7BFF, 0x7E00, true};
constexpr MiniFloat kE4M3{4, 3, 7, false, 0x7E, 0x7F, true};
constexpr MiniFloat kE5M2{5, 2, 15, true, 0x7B, 0x7E, true};
constexpr MiniFloat kE2M1{2, 1, 1, false, 0x7, 0x0, false};

float decode(const MiniFloat& fmt, uint32_t code) {
  const int total = 1 + fmt.exponent_bits + fmt.mantissa_bits;
  const bool negative = (code >> (total - 1)) & 1;
  const uint32_t magnitude = code & ((1u << (total - 1)) - 1);
  const uint32_t exponent_field = magnitude >> fmt.mantissa_bits;
  const uint32_t mantissa = magnitude & ((1u << fmt.mantissa_bits) - 1);
  const uint32_t exponent_all_ones = (1u << fmt.exponent_bits) - 1;
  float value;
  if (fmt.has_inf && exponent_field == exponent_all_ones) {
    value = mantissa == 0 ? INFINITY : NAN;
  } else if (!fmt.has_inf && fmt.has_nan && magnitude == fmt.nan_code) {
    value = NAN;
  } else if (exponent_field == 0) {
    value = std::ldexp(static_cast<float>(mantissa), 1 - fmt.bias - fmt.mantissa_bits);
  } else {
    value = std::ldexp(static_cast<float>(mantissa + (1u << fmt.mantissa_bits)),
                       static_cast<int>(exponent_field) - fmt.bias - fmt.mantissa_bits);
  }
  return negative ? -value : value;
}

uint32_t encode(const MiniFloat& fmt, float f) {
  const int total = 1 + fmt.exponent_bits + fmt.mantissa_bits;
  const uint32_t sign = std::signbit(f) ? (1u << (total - 1)) : 0;
  if (std::isnan(f)) return fmt.has_nan ? (sign | fmt.nan_code) : sign;
  const uint32_t inf_code = ((1u << fmt.exponent_bits) - 1) << fmt.mantissa_bits;
  const float max_value = decode(fmt, fmt.max_finite);
  float x = std::fabs(f);
  if (std::isinf(x)) return sign | (fmt.has_inf ? inf_code : fmt.max_finite);
  if (x == 0.0f) return sign;

  const int min_normal_exp = 1 - fmt.bias;
  int e = std::ilogb(x);
  if (e < min_normal_exp) e = min_normal_exp;  // subnormal range: fixed quantum
  const int quantum_exp = e - fmt.mantissa_bits;
  // Values far below the smallest subnormal scale to < 0.5 and round to zero; ldexp
  // keeps the scaling exact while the result is a normal f32.
  float units = std::rint(std::ldexp(x, -quantum_exp));
  float rounded = std::ldexp(units, quantum_exp);
  if (rounded > max_value) {
    if (!fmt.has_inf) return sign | fmt.max_finite;  // saturate (satfinite)
    // IEEE: overflow to infinity only past max + half an ulp (RNE already decided).
    return sign | inf_code;
  }
  if (rounded == 0.0f) return sign;
  int re = std::ilogb(rounded);
  uint32_t magnitude;
  if (re < min_normal_exp) {
    magnitude = static_cast<uint32_t>(std::ldexp(rounded, fmt.bias - 1 + fmt.mantissa_bits));
  } else {
    uint32_t significand = static_cast<uint32_t>(std::ldexp(rounded, fmt.mantissa_bits - re));
    magnitude = (static_cast<uint32_t>(re + fmt.bias) << fmt.mantissa_bits) |
                (significand & ((1u << fmt.mantissa_bits) - 1));
  }
  return sign | magnitude;
}

}  // namespace

float f16_to_f32(uint16_t h) { return decode(kF16, h); }
uint16_t f32_to_f16(float f) { return static_cast<uint16_t>(encode(kF16, f)); }

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x0040);  // keep it quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest, ties to even; overflow reaches inf
  return static_cast<uint16_t>(u >> 16);
}

float f8_e4m3fn_to_f32(uint8_t v) { return decode(kE4M3, v); }
uint8_t f32_to_f8_e4m3fn(float f) { return static_cast<uint8_t>(encode(kE4M3, f)); }
float f8_e5m2_to_f32(uint8_t v) { return decode(kE5M2, v); }
uint8_t f32_to_f8_e5m2(float f) { return static_cast<uint8_t>(encode(kE5M2, f)); }
float f4_e2m1_to_f32(uint8_t nibble) { return decode(kE2M1, nibble & 0xF); }
uint8_t f32_to_f4_e2m1(float f) { return static_cast<uint8_t>(encode(kE2M1, f)); }

float e8m0_to_f32(uint8_t v) {
  if (v == 0xFF) return NAN;
  return std::ldexp(1.0f, static_cast<int>(v) - 127);
}

uint8_t f32_to_e8m0(float f) {
  if (std::isnan(f)) return 0xFF;
  if (!(f > 0.0f)) return 0;  // zero and negatives: the smallest scale
  if (std::isinf(f)) return 254;
  // Between 2^e and 2^(e+1) the midpoint is 1.5 * 2^e; a tie goes to the even exponent.
  int e = std::ilogb(f);
  float mantissa = std::ldexp(f, -e);  // [1, 2)
  if (mantissa > 1.5f || (mantissa == 1.5f && ((e + 127) & 1))) ++e;
  if (e < -127) return 0;
  if (e > 127) return 254;
  return static_cast<uint8_t>(e + 127);
}

}  // namespace refit
