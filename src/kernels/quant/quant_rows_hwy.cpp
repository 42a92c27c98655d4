// Highway row quantizers (see quant_rows_simd.h). How each scalar step is reproduced:
//
//   amax     |x| accumulated per lane with "keep unless strictly greater", so a NaN lane
//            never replaces the running value (std::max(amax, NaN) == amax), then the max
//            of the (NaN-free) lanes: max is exact and order-free.
//   e4m3     clamp |v| to 448 first: every value above 448 rounds to 448 or to something
//            larger, which the scalar code saturates to 448 as well, so the clamp changes
//            no code. Normal range (|v| >= 2^-6): round the f32 bit pattern to 3 mantissa
//            bits, ties to even, with the integer add 0x7FFFF + (bit 20); a carry into the
//            exponent is the correct next binade. Subnormal range: |v| * 2^9 is exact and
//            Round (ties to even) gives the subnormal code 0..8 (8 is 2^-6, the first
//            normal code, so both ranges meet). NaN: sign | 0x7F. Sign from the f32 sign
//            bit, so -0 gives 0x80 as the scalar code does.
//   e2m1     the eight magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 are counted by seven compares
//            against the midpoints; at a tie the scalar rint keeps the even code, which is
//            "greater than" where the upper code is odd and "at least" where it is even.
//            NaN compares false everywhere: code 0 with the NaN's sign, as the scalar
//            encode (no NaN in e2m1) returns. The scaling ldexp(x, -e) is x * 2^-e: 2^-e is
//            a normal f32 for every e the scale allows, and both round the exact product
//            once, to nearest even.
//   roundf   half away from zero (ggml): t = trunc(v); v - t is exact, so |v - t| >= 0.5
//            decides the step away from zero without the double rounding of v + 0.5.
// Highway needs foreach_target.h right after HWY_TARGET_INCLUDE: not reordered.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quant/quant_rows_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/float_formats.h"

#ifndef REFIT_QUANT_ROWS_HWY_ONCE
#define REFIT_QUANT_ROWS_HWY_ONCE
namespace refit::quant_simd::detail {
// The shared e8m0 exponent of an MXFP4 block from its amax (OCP MX: floor(log2 amax) - 2,
// clamped to [-127, 127]; -127 for zero, subnormal or infinite amax), read from the bits:
// for a normal amax, ilogb is the biased exponent - 127.
inline int mxfp4_exponent(float amax) {
  const int biased = static_cast<int>(std::bit_cast<uint32_t>(amax) >> 23);  // amax >= 0
  if (biased == 0 || biased == 255) return -127;
  return std::max(biased - 129, -127);  // at most 254 - 129 = 125
}
}  // namespace refit::quant_simd::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace refit::quant_simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;

// max |x| over [c0, c1) with NaNs skipped (see the file comment).
HWY_INLINE float RangeAmax(const float* x, int64_t c0, int64_t c1) {
  const DF df;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  auto m = hn::Zero(df);
  int64_t c = c0;
  for (; c + n <= c1; c += n) {
    const auto a = hn::Abs(hn::LoadU(df, x + c));
    m = hn::IfThenElse(hn::Lt(m, a), a, m);
  }
  float amax = hn::GetLane(hn::MaxOfLanes(df, m));
  for (; c < c1; ++c) amax = std::max(amax, std::fabs(x[c]));
  return amax;
}

void GroupAmax(const float* x, int64_t k, int64_t group, float* amax) {
  for (int64_t g = 0, c0 = 0; c0 < k; ++g, c0 += group)
    amax[g] = RangeAmax(x, c0, std::min(k, c0 + group));
}

// e4m3fn codes (in the low byte of each u32 lane) of v, as f32_to_f8_e4m3fn.
HWY_INLINE hn::Vec<DU> EncodeE4m3(hn::Vec<DF> v) {
  const DF df;
  const DU du;
  const DI di;
  const auto bits = hn::BitCast(du, v);
  const auto sign = hn::ShiftRight<24>(hn::And(bits, hn::Set(du, 0x80000000u)));
  const auto a = hn::Min(hn::Abs(v), hn::Set(df, 448.0f));  // NaN lanes are replaced below
  const auto abits = hn::BitCast(du, a);
  const auto odd = hn::And(hn::ShiftRight<20>(abits), hn::Set(du, 1u));
  const auto normal =
      hn::Sub(hn::ShiftRight<20>(hn::Add(abits, hn::Add(hn::Set(du, 0x7FFFFu), odd))),
              hn::Set(du, 120u << 3));
  const auto sub = hn::BitCast(du, hn::ConvertTo(di, hn::Round(hn::Mul(a, hn::Set(df, 512.0f)))));
  const auto mag = hn::IfThenElse(hn::RebindMask(du, hn::Lt(a, hn::Set(df, 0x1p-6f))), sub, normal);
  const auto code = hn::Or(mag, sign);
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Or(sign, hn::Set(du, 0x7Fu)), code);
}

void Fp8Row(const float* x, int64_t k, int64_t group, const float* scale, uint8_t* codes) {
  const DF df;
  const DI di;
  const hn::Rebind<uint8_t, DI> d8;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t g = 0, c0 = 0; c0 < k; ++g, c0 += group) {
    const int64_t c1 = std::min(k, c0 + group);
    const float s = scale[g];
    const auto vs = hn::Set(df, s);
    int64_t c = c0;
    for (; c + n <= c1; c += n) {
      const auto code = EncodeE4m3(hn::Div(hn::LoadU(df, x + c), vs));
      hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di, code)), d8, codes + c);
    }
    for (; c < c1; ++c) codes[c] = f32_to_f8_e4m3fn(x[c] / s);  // the tail: the scalar code itself
  }
}

// e2m1 codes (sign in bit 3) of v, as f32_to_f4_e2m1; see the file comment.
HWY_INLINE hn::Vec<DI> EncodeE2m1(hn::Vec<DF> v) {
  const DF df;
  const DI di;
  const DU du;
  const auto a = hn::Abs(v);
  auto count = hn::Zero(di);
  // A true mask is all ones, -1 as an integer: subtracting it counts the boundary.
  const auto step = [&](auto mask) {
    count = hn::Sub(count, hn::VecFromMask(di, hn::RebindMask(di, mask)));
  };
  step(hn::Gt(a, hn::Set(df, 0.25f)));  // 0 | 0.5: tie to code 0
  step(hn::Ge(a, hn::Set(df, 0.75f)));  // 0.5 | 1: tie to code 2
  step(hn::Gt(a, hn::Set(df, 1.25f)));  // 1 | 1.5: tie to code 2
  step(hn::Ge(a, hn::Set(df, 1.75f)));  // 1.5 | 2: tie to code 4
  step(hn::Gt(a, hn::Set(df, 2.5f)));   // 2 | 3: tie to code 4
  step(hn::Ge(a, hn::Set(df, 3.5f)));   // 3 | 4: tie to code 6
  step(hn::Gt(a, hn::Set(df, 5.0f)));   // 4 | 6: tie to code 6; above 6 saturates at 7
  const auto sign = hn::ShiftRight<28>(hn::And(hn::BitCast(du, v), hn::Set(du, 0x80000000u)));
  return hn::Or(count, hn::BitCast(di, sign));
}

void Mxfp4Row(const float* x, int64_t k, uint8_t* codes, uint8_t* scales, uint8_t* scratch) {
  const DF df;
  const hn::Rebind<uint8_t, DI> d8;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + b * 32;
    const int e = detail::mxfp4_exponent(RangeAmax(xb, 0, 32));
    scales[b] = static_cast<uint8_t>(e + 127);
    const auto mult =
        hn::Set(df, std::bit_cast<float>(static_cast<uint32_t>(127 - e) << 23));  // 2^-e
    for (int64_t j = 0; j < 32; j += n)  // n divides 32 on every x86 target
      hn::StoreU(hn::DemoteTo(d8, EncodeE2m1(hn::Mul(hn::LoadU(df, xb + j), mult))), d8,
                 scratch + b * 32 + j);
  }
  // Pack pairs: as u16, the low byte is element 2i and the high byte element 2i + 1.
  const hn::ScalableTag<uint16_t> d16;
  const hn::RebindToSigned<decltype(d16)> di16;
  const hn::Rebind<uint8_t, decltype(di16)> d8h;
  const int64_t n16 = static_cast<int64_t>(hn::Lanes(d16));
  const auto* pairs = reinterpret_cast<const uint16_t*>(scratch);
  int64_t i = 0;
  for (; i + n16 <= k / 2; i += n16) {
    const auto p = hn::LoadU(d16, pairs + i);
    const auto packed = hn::Or(hn::And(p, hn::Set(d16, uint16_t{0x0F})),
                               hn::And(hn::ShiftRight<4>(p), hn::Set(d16, uint16_t{0xF0})));
    hn::StoreU(hn::DemoteTo(d8h, hn::BitCast(di16, packed)), d8h, codes + i);
  }
  for (; i < k / 2; ++i)
    codes[i] = static_cast<uint8_t>(scratch[2 * i] | (scratch[2 * i + 1] << 4));
}

void Q80Row(const float* x, int64_t k, int8_t* codes, float* d) {
  const DF df;
  const DI di;
  const hn::Rebind<int8_t, DI> d8;
  const int64_t n = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + b * 32;
    const float amax = RangeAmax(xb, 0, 32);
    const float scale = amax / 127.0f;
    const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    d[b] = scale;
    const auto vi = hn::Set(df, inverse);
    const auto half = hn::Set(df, 0.5f);
    const auto one = hn::Set(df, 1.0f);
    for (int64_t j = 0; j < 32; j += n) {
      const auto v = hn::Mul(hn::LoadU(df, xb + j), vi);
      const auto t = hn::Trunc(v);
      const auto away =
          hn::IfThenElseZero(hn::Ge(hn::Abs(hn::Sub(v, t)), half), hn::CopySign(one, v));
      const auto rounded = hn::ConvertTo(di, hn::Add(t, away));
      hn::StoreU(hn::DemoteTo(d8, rounded), d8, codes + b * 32 + j);
    }
  }
}

}  // namespace refit::quant_simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/cpu_isa.h"
#include "kernels/quant/quant_rows_simd.h"

namespace refit::quant_simd {
HWY_EXPORT(GroupAmax);
HWY_EXPORT(Fp8Row);
HWY_EXPORT(Mxfp4Row);
HWY_EXPORT(Q80Row);

// init_cpu_isa applies REFIT_CPU_ISA before the first dispatch (a call_once: cheap).
void group_amax(const float* x, int64_t k, int64_t group, float* amax) {
  cpu::init_cpu_isa();
  HWY_DYNAMIC_DISPATCH(GroupAmax)(x, k, group, amax);
}
void fp8_row(const float* x, int64_t k, int64_t group, const float* scale, uint8_t* codes) {
  cpu::init_cpu_isa();
  HWY_DYNAMIC_DISPATCH(Fp8Row)(x, k, group, scale, codes);
}
void mxfp4_row(const float* x, int64_t k, uint8_t* codes, uint8_t* scales, uint8_t* scratch) {
  cpu::init_cpu_isa();
  HWY_DYNAMIC_DISPATCH(Mxfp4Row)(x, k, codes, scales, scratch);
}
void q8_0_row(const float* x, int64_t k, int8_t* codes, float* d) {
  cpu::init_cpu_isa();
  HWY_DYNAMIC_DISPATCH(Q80Row)(x, k, codes, d);
}

}  // namespace refit::quant_simd
#endif  // HWY_ONCE
