// ggml block layouts and dequantization, checked against hand-built blocks whose values
// follow from ggml's definitions (ggml-quants.c dequantize_row_q8_0 / _q4_0 / _mxfp4).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "formats/gguf_types.h"

namespace refit {
namespace {

TEST(FormatsDequant, type_ids_and_block_sizes_are_ggml_s) {
  EXPECT_EQ(ggml_type_traits(8)->type_size, 34u);   // Q8_0
  EXPECT_EQ(ggml_type_traits(2)->type_size, 18u);   // Q4_0
  EXPECT_EQ(ggml_type_traits(39)->type_size, 17u);  // MXFP4
  EXPECT_EQ(ggml_type_traits(30)->dtype, DType::bf16);
  EXPECT_EQ(ggml_type_traits(1)->dtype, DType::f16);
  EXPECT_EQ(ggml_type_traits(0)->dtype, DType::f32);
  EXPECT_EQ(ggml_type_traits(4), nullptr);   // removed Q4_2
  EXPECT_EQ(ggml_type_traits(31), nullptr);  // removed Q4_0_4_4
  EXPECT_EQ(ggml_type_traits(40000), nullptr);
  EXPECT_EQ(ggml_nbytes(GgmlType::q8_0, 64), 68u);
  EXPECT_FALSE(ggml_nbytes(GgmlType::q8_0, 33).has_value());
  EXPECT_EQ(ggml_nbytes(GgmlType::q4_k, 256), 144u);
}

TEST(FormatsDequant, q8_0_is_int8_times_f16_scale) {
  BlockQ8_0 b[2];
  b[0].d = 0x3800;  // 0.5
  b[1].d = 0xC000;  // -2.0
  for (int j = 0; j < 32; ++j)
    b[0].qs[j] = static_cast<int8_t>(j - 16), b[1].qs[j] = static_cast<int8_t>(j == 0 ? -128 : 127);
  float out[64];
  dequantize_row(GgmlType::q8_0, b, sizeof b, out, 64);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], (j - 16) * 0.5f);
  EXPECT_EQ(out[32], 256.0f);
  EXPECT_EQ(out[33], -254.0f);
}

TEST(FormatsDequant, q4_0_low_nibbles_are_the_first_half_and_offset_by_8) {
  BlockQ4_0 b;
  b.d = 0x4000;  // 2.0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>((j & 15) | ((15 - j) << 4));
  float out[32];
  dequantize_row(GgmlType::q4_0, &b, sizeof b, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], (j - 8) * 2.0f);
    EXPECT_EQ(out[j + 16], (15 - j - 8) * 2.0f);
  }
}

TEST(FormatsDequant, mxfp4_uses_doubled_e2m1_values_and_half_e8m0_scale) {
  EXPECT_EQ(e8m0_to_f32_half(128), 1.0f);
  EXPECT_EQ(e8m0_to_f32_half(127), 0.5f);
  EXPECT_EQ(e8m0_to_f32_half(0), std::ldexp(1.0f, -128));  // a float32 subnormal
  EXPECT_EQ(e8m0_to_f32_half(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_f32_half(255), std::ldexp(1.0f, 127));
  const float e2m1[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.f, -.5f, -1, -1.5f, -2, -3, -4, -6};
  BlockMxfp4 b[2];
  b[0].e = 127;  // OCP scale 2^0: values are exactly the e2m1 values
  b[1].e = 130;  // OCP scale 2^3
  for (int j = 0; j < 16; ++j) {
    b[0].qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    b[1].qs[j] = static_cast<uint8_t>(j | (j << 4));
  }
  float out[64];
  dequantize_row(GgmlType::mxfp4, b, sizeof b, out, 64);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], e2m1[j]) << j;
    EXPECT_EQ(out[j + 16], e2m1[15 - j]) << j;
    EXPECT_EQ(out[32 + j], e2m1[j] * 8) << j;
    EXPECT_EQ(out[48 + j], e2m1[j] * 8) << j;
  }
}

TEST(FormatsDequant, f16_and_bf16_rows_convert_exactly) {
  const uint16_t h[3] = {0x3C00, 0xC100, 0x0001};  // 1, -2.5, smallest subnormal
  float out[3];
  dequantize_row(GgmlType::f16, h, sizeof h, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.5f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  const uint16_t bf[2] = {0x3F80, 0xC0A0};  // 1, -5
  dequantize_row(GgmlType::bf16, bf, sizeof bf, out, 2);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -5.0f);
}

TEST(FormatsDequant, wrong_counts_sizes_and_unsupported_types_are_refused) {
  BlockQ8_0 b{};
  float out[64];
  EXPECT_THROW(dequantize_row(GgmlType::q8_0, &b, sizeof b, out, 31), Error);
  EXPECT_THROW(dequantize_row(GgmlType::q8_0, &b, sizeof b, out, 64), Error);
  EXPECT_THROW(dequantize_row(GgmlType::q4_k, &b, sizeof b, out, 32), Error);
}

}  // namespace
}  // namespace refit
