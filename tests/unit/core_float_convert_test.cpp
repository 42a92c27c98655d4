// The bulk f32 <-> f16/bf16 converters (core/float_convert.h) give exactly the bits of the
// scalar functions: every 16-bit input, a dense sweep of f32 bit patterns (every 61st of
// 2^32, so every exponent and many mantissas, NaNs and infinities included), and the
// boundaries where rounding changes. Blocks mixing NaN and ordinary lanes take the scalar
// fallback, so they are tested at every position of a block and in the tail.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/float_convert.h"
#include "core/float_formats.h"
#include "core/tensor.h"

namespace refit {
namespace {

std::vector<float> sweep_f32() {
  std::vector<float> v;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 61)
    v.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  // Around every f16 / bf16 rounding boundary of a few exponents, and the overflow edges.
  for (uint32_t base :
       {0x3F800000u, 0x38800000u, 0x33800000u, 0x477FE000u, 0x477FF000u, 0x7F7F8000u}) {
    for (uint32_t d = 0; d < 0x4000; ++d) {
      v.push_back(std::bit_cast<float>(base + d));
      v.push_back(std::bit_cast<float>((base + d) | 0x80000000u));
    }
  }
  for (float f : {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::signaling_NaN(), 65504.0f, 65520.0f, 65519.99f,
                  6.1e-5f, 5.96e-8f, 2.98e-8f})
    v.push_back(f);
  return v;
}

TEST(FloatConvert, f32_to_f16_equals_scalar_bit_for_bit) {
  const std::vector<float> in = sweep_f32();
  std::vector<uint16_t> out(in.size());
  convert_f32_to_f16(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(out[i], f32_to_f16(in[i]))
        << "input bits 0x" << std::hex << std::bit_cast<uint32_t>(in[i]);
}

TEST(FloatConvert, f32_to_bf16_equals_scalar_bit_for_bit) {
  const std::vector<float> in = sweep_f32();
  std::vector<uint16_t> out(in.size());
  convert_f32_to_bf16(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(out[i], f32_to_bf16(in[i]))
        << "input bits 0x" << std::hex << std::bit_cast<uint32_t>(in[i]);
}

TEST(FloatConvert, every_f16_and_bf16_widens_as_the_scalar_function) {
  std::vector<uint16_t> in(65536 + 5);  // + a tail shorter than a block
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i);
  std::vector<float> out(in.size());
  convert_f16_to_f32(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(f16_to_f32(in[i])))
        << std::hex << in[i];
  convert_bf16_to_f32(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(bf16_to_f32(in[i])))
        << std::hex << in[i];
}

TEST(FloatConvert, a_nan_at_any_block_position_keeps_its_neighbours_exact) {
  for (int pos = 0; pos < 19; ++pos) {
    std::vector<float> in(19);
    for (int i = 0; i < 19; ++i) in[size_t(i)] = 1.0f / float(i + 3);
    in[size_t(pos)] = std::bit_cast<float>(0x7FA00001u);  // signalling NaN with a payload
    std::vector<uint16_t> h(in.size()), b(in.size());
    convert_f32_to_f16(in.data(), h.data(), 19);
    convert_f32_to_bf16(in.data(), b.data(), 19);
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(h[i], f32_to_f16(in[i])) << pos << " " << i;
      ASSERT_EQ(b[i], f32_to_bf16(in[i])) << pos << " " << i;
    }
  }
}

TEST(FloatConvert, tensor_copy_from_uses_them_and_round_trips) {
  Tensor f = Tensor::empty({3, 37}, DType::f32);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = std::sin(float(i)) * 1000.0f;
  for (DType half : {DType::f16, DType::bf16}) {
    Tensor h = f.to(half);
    for (int64_t i = 0; i < f.numel(); ++i) {
      const float x = f.data<float>()[i];
      ASSERT_EQ(h.data<uint16_t>()[i], half == DType::f16 ? f32_to_f16(x) : f32_to_bf16(x));
    }
    Tensor back = h.to(DType::f32);
    for (int64_t i = 0; i < f.numel(); ++i) {
      const uint16_t v = h.data<uint16_t>()[i];
      ASSERT_EQ(back.data<float>()[i], half == DType::f16 ? f16_to_f32(v) : bf16_to_f32(v));
    }
  }
}

}  // namespace
}  // namespace refit
