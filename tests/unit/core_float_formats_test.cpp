// Round-to-nearest-even conversions for every narrow float format, checked exhaustively:
// every code decodes to the value the format's definition gives (computed here with
// std::pow, independently of the library's ldexp-based decoder), every finite value
// round-trips, and between each pair of neighbours the midpoint goes to the even code
// while points just inside either side go to that side.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/float_formats.h"

namespace refit {
namespace {

struct Format {
  const char* name;
  int exponent_bits, mantissa_bits, bias;
  bool ieee_specials;  // all-ones exponent is inf/NaN
  std::function<float(uint32_t)> decode;
  std::function<uint32_t(float)> encode;
  float max_finite;
};

// Definition-level decode, written independently of the library.
double reference_value(const Format& f, uint32_t code, bool* is_nan) {
  const int total = 1 + f.exponent_bits + f.mantissa_bits;
  const int sign = (code >> (total - 1)) & 1;
  const uint32_t e = (code >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1);
  const uint32_t m = code & ((1u << f.mantissa_bits) - 1);
  *is_nan = false;
  if (f.ieee_specials && e == (1u << f.exponent_bits) - 1) {
    if (m != 0) *is_nan = true;
    return sign ? -INFINITY : INFINITY;
  }
  double frac = m / std::pow(2.0, f.mantissa_bits);
  double v =
      e == 0 ? frac * std::pow(2.0, 1 - f.bias) : (1 + frac) * std::pow(2.0, int(e) - f.bias);
  return sign ? -v : v;
}

std::vector<Format> formats() {
  return {
      {"f8_e4m3fn", 4, 3, 7, false, [](uint32_t c) { return f8_e4m3fn_to_f32(uint8_t(c)); },
       [](float x) { return uint32_t(f32_to_f8_e4m3fn(x)); }, 448.0f},
      {"f8_e5m2", 5, 2, 15, true, [](uint32_t c) { return f8_e5m2_to_f32(uint8_t(c)); },
       [](float x) { return uint32_t(f32_to_f8_e5m2(x)); }, 57344.0f},
      {"f4_e2m1", 2, 1, 1, false, [](uint32_t c) { return f4_e2m1_to_f32(uint8_t(c)); },
       [](float x) { return uint32_t(f32_to_f4_e2m1(x)); }, 6.0f},
      {"f16", 5, 10, 15, true, [](uint32_t c) { return f16_to_f32(uint16_t(c)); },
       [](float x) { return uint32_t(f32_to_f16(x)); }, 65504.0f},
  };
}

TEST(FloatFormats, EveryCodeDecodesToItsDefinition) {
  for (const Format& f : formats()) {
    const uint32_t n = 1u << (1 + f.exponent_bits + f.mantissa_bits);
    for (uint32_t code = 0; code < n; ++code) {
      bool nan = false;
      double want = reference_value(f, code, &nan);
      // e4m3fn: S.1111.111 is NaN (no infinities).
      if (std::string(f.name) == "f8_e4m3fn" && (code & 0x7F) == 0x7F) nan = true;
      float got = f.decode(code);
      if (nan) {
        EXPECT_TRUE(std::isnan(got)) << f.name << " code " << code;
      } else {
        EXPECT_EQ(got, static_cast<float>(want)) << f.name << " code " << code;
      }
    }
  }
}

TEST(FloatFormats, RoundToNearestEvenBetweenEveryPairOfNeighbours) {
  for (const Format& f : formats()) {
    const uint32_t magnitude_codes = 1u << (f.exponent_bits + f.mantissa_bits);
    const uint32_t sign_bit = magnitude_codes;
    std::vector<std::pair<float, uint32_t>> finite;  // ascending positive values
    for (uint32_t c = 0; c < magnitude_codes; ++c) {
      float v = f.decode(c);
      if (std::isfinite(v)) finite.emplace_back(v, c);
    }
    for (size_t i = 0; i < finite.size(); ++i) {
      auto [v, c] = finite[i];
      EXPECT_EQ(f.encode(v), c) << f.name << " round trip " << v;
      EXPECT_EQ(f.encode(-v), c | sign_bit) << f.name << " round trip " << -v;
      if (i + 1 == finite.size()) break;
      auto [w, d] = finite[i + 1];
      float mid = (v + w) / 2;  // exact: neighbours differ by one power-of-two ulp
      uint32_t even = (c % 2 == 0) ? c : d;
      EXPECT_EQ(f.encode(mid), even) << f.name << " midpoint of " << v << " and " << w;
      EXPECT_EQ(f.encode(std::nextafter(mid, 0.0f)), c) << f.name << " below mid " << mid;
      EXPECT_EQ(f.encode(std::nextafter(mid, INFINITY)), d) << f.name << " above mid " << mid;
      EXPECT_EQ(f.encode(-mid), even | sign_bit) << f.name << " negative midpoint " << -mid;
    }
  }
}

TEST(FloatFormats, OverflowSaturatesOrBecomesInfinity) {
  EXPECT_EQ(f32_to_f8_e4m3fn(1e6f), 0x7E);  // satfinite: 448
  EXPECT_EQ(f32_to_f8_e4m3fn(-INFINITY), 0xFE);
  EXPECT_TRUE(std::isnan(f8_e4m3fn_to_f32(f32_to_f8_e4m3fn(NAN))));
  EXPECT_EQ(f32_to_f4_e2m1(100.0f), 0x7);  // 6.0
  EXPECT_EQ(f32_to_f4_e2m1(-100.0f), 0xF);
  EXPECT_EQ(f32_to_f8_e5m2(1e6f), 0x7C);      // inf
  EXPECT_EQ(f32_to_f8_e5m2(61440.0f), 0x7C);  // midpoint of max and the next: ties to even (inf)
  EXPECT_EQ(f32_to_f8_e5m2(61439.0f), 0x7B);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // half-way to the next binade rounds to inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
}

TEST(FloatFormats, KnownF16AndBf16BitPatterns) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(0.1f), 0x2E66);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);

  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(3.14159265f), 0x4049);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // overflow to inf
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  for (uint32_t c = 0; c < 65536; ++c) {  // every finite bf16 round-trips
    float v = bf16_to_f32(uint16_t(c));
    if (!std::isnan(v)) {
      EXPECT_EQ(f32_to_bf16(v), c);
    }
  }
}

TEST(FloatFormats, E8M0IsAPowerOfTwoScale) {
  for (int c = 0; c < 255; ++c) {
    EXPECT_EQ(e8m0_to_f32(uint8_t(c)), static_cast<float>(std::pow(2.0, c - 127))) << c;
    EXPECT_EQ(f32_to_e8m0(e8m0_to_f32(uint8_t(c))), c) << c;
  }
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
  EXPECT_EQ(f32_to_e8m0(NAN), 0xFF);
  EXPECT_EQ(f32_to_e8m0(1.49f), 127);
  EXPECT_EQ(f32_to_e8m0(1.51f), 128);
  EXPECT_EQ(f32_to_e8m0(1.5f), 128);  // tie: exponent 1 is odd... 127 is odd, 128 even
  EXPECT_EQ(f32_to_e8m0(3.0f), 128);  // tie between 2^1 (128) and 2^2 (129): even wins
  EXPECT_EQ(f32_to_e8m0(0.0f), 0);
}

}  // namespace
}  // namespace refit
