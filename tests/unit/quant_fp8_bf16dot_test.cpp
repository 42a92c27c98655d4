// The AVX-512 BF16 FP8 W8A8 kernel (matmul_fp8_bf16dot.h): every e4m3 weight code, the
// subnormal ones and both zeros included, is read back exactly through one-hot activation
// codes (a NaN code makes its row NaN); the per-token activation quantizer is its scalar
// definition bit for bit; the kernel is the one dispatched for FP8 W8A8 where the CPU
// has it and REFIT_CPU_ISA allows avx3, and the Highway kernel otherwise. Agreement with
// the scalar kernel and the double reference, and batch invariance, are checked over odd
// shapes with every other SIMD kernel in quant_kernels_hwy_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/float_formats.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/matmul_fp8_bf16dot.h"
#include "kernels/matmul_quantized.h"
#include "kernels/quant/quant_scheme.h"
#include "quant_test_util.h"

namespace refit {
namespace {

const Kernel& selected(const Tensor& x, const Tensor& xs, const Tensor& w, const Tensor& ws,
                       const Tensor& out) {
  const Tensor bias;
  const Tensor* args[] = {&x, &xs, &w, &ws, &bias, &out};
  return KernelRegistry::global().select("matmul_quantized", args);
}

TEST(Fp8Bf16Dot, every_weight_code_reads_back_exactly) {
  if (!cpu::fp8dot::usable()) GTEST_SKIP() << "no AVX-512 BF16 + VBMI here";
  const int64_t N = 16, K = 64, M = K;  // 1024 codes: every byte four times
  Tensor codes = Tensor::empty({N, K}, DType::u8);
  auto* bytes = static_cast<uint8_t*>(codes.raw_data());
  for (int64_t i = 0; i < N * K; ++i) bytes[i] = static_cast<uint8_t>((i * 5 + i / 256) & 0xFF);
  // NaN codes (0x7F, 0xFF) would make their whole row NaN through 0 * NaN: one row keeps
  // them (checked below), the others hold -0 there.
  for (int64_t i = K; i < N * K; ++i)
    if ((bytes[i] & 0x7F) == 0x7F) bytes[i] = 0x80;
  bytes[5] = 0x7F;
  const Tensor w = Tensor::from_storage(codes.storage(), DType::f8_e4m3fn, {N, K});
  Tensor ws = Tensor::empty({N, 1}, DType::f32);
  for (int64_t n = 0; n < N; ++n) ws.data<float>()[n] = 0.5f + 0.25f * float(n);
  // Row m of x: code 0x38 (1.0) at column m, zeros elsewhere; token scale 2.
  Tensor x = Tensor::zeros({M, K}, DType::f8_e4m3fn), xs = Tensor::empty({M}, DType::f32);
  for (int64_t m = 0; m < M; ++m) {
    static_cast<uint8_t*>(x.raw_data())[m * K + m] = 0x38;
    xs.data<float>()[m] = 2.0f;
  }
  Tensor out = Tensor::empty({M, N}, DType::f32);
  ASSERT_NE(selected(x, xs, w, ws, out).name.find("avx512bf16"), std::string::npos);
  ops::matmul_quantized(x, xs, w, ws, K, Tensor(), out);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t c = bytes[n * K + m];
      const float want = f8_e4m3fn_to_f32(c) * ws.data<float>()[n] * 2.0f,
                  got = out.data<float>()[m * N + n];
      if (n == 0) {
        EXPECT_TRUE(std::isnan(got)) << "row 0 holds a NaN code";
      } else {
        EXPECT_EQ(got, want) << "code " << int(c) << " row " << n;
      }
    }
}

// The per-token activation quantizer (SIMD row quantizers) equals its scalar definition,
// f32_to_f8_e4m3fn(x / (amax / 448)), bit for bit, NaN and infinities included.
TEST(Fp8Bf16Dot, per_token_activation_codes_equal_the_scalar_definition) {
  const int64_t M = 5, K = 301;
  Tensor x = Tensor::empty({M, K}, DType::f32);
  for (int64_t i = 0; i < M * K; ++i)
    x.data<float>()[i] = std::sin(0.37f * float(i)) * float(1 + i % 11) * 0.01f;
  x.data<float>()[K + 3] = NAN;           // row 1: skipped by amax, its code NaN
  x.data<float>()[2 * K + 5] = INFINITY;  // row 2: scale 1 (non-finite amax)
  for (int64_t k = 0; k < K; ++k) x.data<float>()[3 * K + k] = 0.0f;  // row 3: zeros, scale 1
  Tensor xq = Tensor::empty({M, K}, DType::f8_e4m3fn), xs = Tensor::empty({M}, DType::f32);
  ops::quantize_per_token_fp8(x, xq, xs);
  for (int64_t m = 0; m < M; ++m) {
    float amax = 0.0f;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(x.data<float>()[m * K + k]));
    float scale = amax / 448.0f;
    if (!(scale > 0.0f) || !std::isfinite(scale)) scale = 1.0f;
    EXPECT_EQ(xs.data<float>()[m], scale) << "row " << m;
    for (int64_t k = 0; k < K; ++k)
      ASSERT_EQ(static_cast<uint8_t*>(xq.raw_data())[m * K + k],
                f32_to_f8_e4m3fn(x.data<float>()[m * K + k] / scale))
          << "row " << m << " col " << k;
  }
}

// Scale groups that do not fill whole 64-code vectors (here 96: no scheme makes them, the
// op allows them) are handed to the Highway kernel: correct results, not a wrong split.
TEST(Fp8Bf16Dot, scale_groups_splitting_a_vector_still_give_the_right_result) {
  const int64_t M = 2, N = 16, K = 192, group = 96;
  Tensor codes = Tensor::empty({N, K}, DType::u8);
  for (int64_t i = 0; i < N * K; ++i) {
    uint8_t c = static_cast<uint8_t>((i * 37 + 11) & 0xFF);
    if ((c & 0x7F) == 0x7F) c = 0x30;
    static_cast<uint8_t*>(codes.raw_data())[i] = c;
  }
  const Tensor w = Tensor::from_storage(codes.storage(), DType::f8_e4m3fn, {N, K});
  Tensor ws = Tensor::empty({N, 2}, DType::f32);
  for (int64_t i = 0; i < 2 * N; ++i) ws.data<float>()[i] = 0.01f * float(1 + i % 5);
  Tensor x = Tensor::empty({M, K}, DType::f8_e4m3fn), xs = Tensor::empty({M}, DType::f32);
  for (int64_t i = 0; i < M * K; ++i)
    static_cast<uint8_t*>(x.raw_data())[i] = static_cast<uint8_t>((i * 13 + 5) % 0x7E);
  xs.data<float>()[0] = 0.5f, xs.data<float>()[1] = 2.0f;
  Tensor out = Tensor::empty({M, N}, DType::f32);
  ops::matmul_quantized(x, xs, w, ws, group, Tensor(), out);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double v = double(f8_e4m3fn_to_f32(static_cast<uint8_t*>(x.raw_data())[m * K + k])) *
                         xs.data<float>()[m] *
                         f8_e4m3fn_to_f32(static_cast<uint8_t*>(codes.raw_data())[n * K + k]) *
                         ws.data<float>()[n * 2 + k / group];
        ref += v;
        mag += std::fabs(v);
      }
      EXPECT_LE(std::fabs(out.data<float>()[m * N + n] - ref), 1e-5 * mag) << m << " " << n;
    }
}

TEST(Fp8Bf16Dot, below_avx3_the_highway_kernel_takes_fp8_w8a8) {
  Tensor x = Tensor::zeros({1, 64}, DType::f8_e4m3fn), xs = Tensor::zeros({1}, DType::f32);
  Tensor w = Tensor::zeros({16, 64}, DType::f8_e4m3fn), ws = Tensor::zeros({16, 1}, DType::f32);
  Tensor out = Tensor::empty({1, 16}, DType::f32);
  cpu::set_cpu_isa("avx2");
  EXPECT_NE(selected(x, xs, w, ws, out).name.find(".hwy_f8"), std::string::npos)
      << selected(x, xs, w, ws, out).name;
  const char* env = std::getenv("REFIT_CPU_ISA");
  cpu::set_cpu_isa(env && *env ? env : cpu::cpu_isas_available().front());
  if (cpu::fp8dot::usable()) {
    EXPECT_NE(selected(x, xs, w, ws, out).name.find("avx512bf16"), std::string::npos);
  }
}

// A shuffled_16x16 weight is read in place (its 16-byte pieces re-assembled in registers)
// and gives the plain layout's bits: per-channel and 128-block scales, K with a last
// 64-code vector of one 32-byte piece (K % 64 == 32), several tiles, batches of 1-17 rows.
TEST(Fp8Bf16Dot, shuffled_weights_give_the_plain_layouts_bits) {
  if (!cpu::fp8dot::usable()) GTEST_SKIP() << "no AVX-512 BF16 + VBMI here";
  struct Case {
    const char* scheme;
    int64_t n, k;
  };
  for (const Case c : {Case{"fp8-channel-w8a8", 32, 288}, Case{"fp8-channel-w8a8", 64, 2048},
                       Case{"fp8-block-w8a8", 48, 640}, Case{"fp8-block-w8a8", 32, 2048}}) {
    const QuantScheme s = parse_quant_scheme(c.scheme);
    const testing::QuantWeight plain = testing::make_quant_weight(s, c.n, c.k, false, 5);
    const testing::QuantWeight shuffled = testing::make_quant_weight(s, c.n, c.k, true, 5);
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{17}}) {
      Tensor x = Tensor::empty({m, c.k}, DType::f32);
      for (int64_t i = 0; i < m * c.k; ++i)
        x.data<float>()[i] = std::sin(0.71f * float(i)) * float(1 + i % 13);
      Tensor xq = Tensor::empty({m, c.k}, DType::f8_e4m3fn), xs = Tensor::empty({m}, DType::f32);
      ops::quantize_per_token_fp8(x, xq, xs);
      Tensor a = Tensor::empty({m, c.n}, DType::f32), b = Tensor::empty({m, c.n}, DType::f32);
      ASSERT_NE(selected(xq, xs, shuffled.codes, shuffled.scales, b).name.find("avx512bf16"),
                std::string::npos);
      ops::matmul_quantized(xq, xs, plain.codes, plain.scales, s.group(c.k), Tensor(), a);
      ops::matmul_quantized(xq, xs, shuffled.codes, shuffled.scales, s.group(c.k), Tensor(), b);
      EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()))
          << c.scheme << " N " << c.n << " K " << c.k << " M " << m;
      float mag = 0;
      for (float v : a.to_floats()) mag = std::max(mag, std::fabs(v));
      EXPECT_GT(mag, 0.0f) << "an all-zero output would prove nothing";
    }
  }
}

}  // namespace
}  // namespace refit
