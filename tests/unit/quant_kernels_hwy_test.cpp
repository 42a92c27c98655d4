// The Highway quantized matmul kernels (matmul_quantized_hwy.cpp) under every SIMD target
// this CPU runs: chosen by dispatch over the scalar kernels; equal to the scalar kernels
// and to a dequantize-then-matmul reference in double to 1e-4 relative, over odd shapes;
// every e4m3 / e2m1 code decoded exactly; each output row bitwise the same whatever M is
// (batch invariance: decode and prefill paths share one reduction order).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/float_formats.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/matmul_fp8_bf16dot.h"
#include "kernels/matmul_quantized.h"
#include "kernels/quant/quant_scheme.h"
#include "kernels_test_util.h"
#include "quant_test_util.h"
#include "weights/layout_transform.h"

namespace refit {
namespace {

using testing::for_each_isa;

using testing::QuantWeight;

QuantWeight make_weight(const QuantScheme& s, int64_t n, int64_t k, bool shuffled, uint32_t seed) {
  return testing::make_quant_weight(s, n, k, shuffled, seed, 5);
}

// The activations a kernel sees: f32, or per-token e4m3 codes for W8A8; `xr` the f32
// values they stand for.
struct Activations {
  Tensor x, x_scale;
  std::vector<float> xr;
};

Activations make_activations(const QuantScheme& s, int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Activations a;
  Tensor x = Tensor::empty({m, k}, DType::f32);
  for (int64_t i = 0; i < m * k; ++i) x.data<float>()[i] = dist(rng);
  a.x = x;
  a.xr = x.to_floats();
  if (s.w8a8) {
    a.x = Tensor::empty({m, k}, DType::f8_e4m3fn);
    a.x_scale = Tensor::empty({m}, DType::f32);
    ops::quantize_per_token_fp8(x, a.x, a.x_scale);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < k; ++i)
        a.xr[r * k + i] = f8_e4m3fn_to_f32(static_cast<uint8_t*>(a.x.raw_data())[r * k + i]) *
                          a.x_scale.data<float>()[r];
  }
  return a;
}

const Kernel& selected(const Activations& a, const QuantWeight& w, const Tensor& bias,
                       const Tensor& out) {
  const Tensor* args[] = {&a.x, &a.x_scale, &w.codes, &w.scales, &bias, &out};
  return KernelRegistry::global().select("matmul_quantized", args);
}

// The scalar kernel for the same arguments: the selected name without "hwy_" (or, for the
// AVX-512 BF16 FP8 W8A8 kernel, matmul_fp8_bf16dot.h, its "avx512bf16_f8_w8a8_" as "f8_").
kernels::MatmulQuantizedFn scalar_kernel(const std::string& simd_name) {
  std::string name = simd_name;
  if (const size_t at = name.find("hwy_"); at != std::string::npos) name.erase(at, 4);
  if (const size_t at = name.find("avx512bf16_f8_w8a8_"); at != std::string::npos)
    name.replace(at, 19, "f8_");
  for (const Kernel* k : KernelRegistry::global().kernels("matmul_quantized"))
    if (k->name == name) return reinterpret_cast<kernels::MatmulQuantizedFn>(k->fn);
  ADD_FAILURE() << "no scalar kernel " << name;
  return nullptr;
}

using testing::KernelCase;

std::vector<KernelCase> cases() {
  std::vector<KernelCase> out;
  for (const char* scheme : {"fp8-tensor", "fp8-channel", "fp8-block", "fp8-channel-w8a8",
                             "fp8-block-w8a8", "mxfp4", "q8_0"})
    for (bool shuffled : {false, true}) {
      out.push_back({scheme, shuffled, 48, 256});
      // fp8-block: a partial 96-column block (MXFP4 bytes must fill 32-byte tiles to shuffle).
      out.push_back({scheme, shuffled, 32, shuffled && std::string(scheme) == "mxfp4" ? 384 : 352});
      if (!shuffled) {
        out.push_back({scheme, false, 37, 96});  // N not a multiple of 16 or of the row tile
        out.push_back({scheme, false, 1, 32});
      }
    }
  // Odd K: per-row scales (one group) with a scalar tail after the vectors.
  for (const char* scheme : {"fp8-tensor", "fp8-channel", "fp8-channel-w8a8"}) {
    out.push_back({scheme, false, 19, 17});
    out.push_back({scheme, false, 21, 131});
    out.push_back({scheme, false, 5, 3});
  }
  return out;
}

class QuantKernelHwy : public ::testing::TestWithParam<KernelCase> {};

TEST_P(QuantKernelHwy, matches_scalar_kernel_and_reference_and_is_batch_invariant_under_every_isa) {
  const KernelCase c = GetParam();
  const QuantScheme s = parse_quant_scheme(c.scheme);
  const QuantWeight w = make_weight(s, c.n, c.k, c.shuffled, 7);
  const int64_t group = s.group(c.k);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Tensor bias = Tensor::empty({c.n}, DType::f32);
  for (int64_t i = 0; i < c.n; ++i) bias.data<float>()[i] = dist(rng);
  for_each_isa([&] {
    const int64_t big_m = 70;
    const Activations all = make_activations(s, big_m, c.k, 11);
    Tensor out_all = Tensor::empty({big_m, c.n}, DType::f32);
    ops::matmul_quantized(all.x, all.x_scale, w.codes, w.scales, group, bias, out_all);
    const std::string name = selected(all, w, bias, out_all).name;
    const bool bf16dot = s.w8a8 && cpu::fp8dot::usable();
    EXPECT_NE(name.find(bf16dot ? ".avx512bf16_f8_w8a8_" : ".hwy_"), std::string::npos) << name;
    // 1-16 rows take the decode kernels (f4: 1-7), four x rows a pass; more the prefill
    // path: its dequantized tiles (f32; f4 on AVX2 bf16) through the float kernel's small
    // batches (up to 32 rows for f32, 64 for bf16) and converted blocks (70).
    for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{8},
                      int64_t{9}, int64_t{16}, int64_t{17}, int64_t{40}, big_m}) {
      SCOPED_TRACE(::testing::Message() << c.scheme << " M " << m);
      // The first m rows of the big batch, as their own call.
      Activations a;
      a.x = all.x.narrow(0, 0, m).contiguous();
      if (all.x_scale.defined()) a.x_scale = all.x_scale.narrow(0, 0, m).contiguous();
      Tensor out = Tensor::empty({m, c.n}, DType::f32),
             out_scalar = Tensor::empty({m, c.n}, DType::f32);
      ops::matmul_quantized(a.x, a.x_scale, w.codes, w.scales, group, bias, out);
      EXPECT_EQ(selected(a, w, bias, out).name, name);
      scalar_kernel(name)(a.x, a.x_scale, w.codes, w.scales, group, bias, out_scalar);
      double max_ref = 0, max_diff_ref = 0, max_diff_scalar = 0;
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < c.n; ++j) {
          double ref = bias.data<float>()[j];
          for (int64_t i = 0; i < c.k; ++i)
            ref += double(all.xr[r * c.k + i]) * double(w.dequantized[j * c.k + i]);
          const float got = out.data<float>()[r * c.n + j];
          max_ref = std::max(max_ref, std::fabs(ref));
          max_diff_ref = std::max(max_diff_ref, std::fabs(ref - got));
          max_diff_scalar = std::max(
              max_diff_scalar, std::fabs(double(out_scalar.data<float>()[r * c.n + j]) - got));
          // Batch invariance: bitwise the row of the big call.
          const float in_batch = out_all.data<float>()[r * c.n + j];
          ASSERT_EQ(std::memcmp(&got, &in_batch, sizeof(float)), 0)
              << "row " << r << " col " << j << ": " << got << " alone vs " << in_batch
              << " in a batch of " << big_m;
        }
      EXPECT_LE(max_diff_ref, 1e-4 * max_ref)
          << "vs dequantize-then-matmul: " << max_diff_ref << " of " << max_ref;
      EXPECT_LE(max_diff_scalar, 1e-4 * max_ref)
          << "vs scalar kernel: " << max_diff_scalar << " of " << max_ref;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantKernelHwy, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string name = info.param.scheme + (info.param.shuffled ? "_shuffled" : "_plain") + "_" +
                     std::to_string(info.param.n) + "x" + std::to_string(info.param.k);
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
});

// One-hot activations read single weights back: out[m, n] = code(n, m) * scale, exactly,
// for every e4m3 code (subnormals, both zeros) and every e2m1 nibble; a NaN code (which
// would poison its whole row through 0 * NaN) gives NaN. Plane 2: f8 scales too large to
// carry the kernels' 2^120 fold (the unfolded path), still exact.
TEST(QuantKernelHwyDecode, every_code_is_decoded_exactly_under_every_isa) {
  for (int plane = 0; plane < 3; ++plane) {
    const bool f4 = plane == 1;
    SCOPED_TRACE(::testing::Message() << "plane " << plane);
    const int64_t N = 16, K = 32;  // f8: 512 codes (each byte twice); f4: 1024 nibbles
    Tensor codes = Tensor::empty({N, f4 ? K / 2 : K}, DType::u8);
    auto* bytes = static_cast<uint8_t*>(codes.raw_data());
    for (int64_t i = 0; i < codes.numel(); ++i) bytes[i] = static_cast<uint8_t>((i * 7 + 3) & 0xFF);
    for (int64_t i = 0; i < 256 && !f4; ++i)
      bytes[i] = static_cast<uint8_t>(i);  // every byte once, in order
    for (int64_t i = 0; i < codes.numel() && !f4; ++i)
      if ((bytes[i] & 0x7F) == 0x7F) bytes[i] = static_cast<uint8_t>(0x80);  // NaN: checked below
    Tensor w =
        Tensor::from_storage(codes.storage(), f4 ? DType::f4_e2m1 : DType::f8_e4m3fn, {N, K});
    Tensor scales = Tensor::empty({N, 1}, f4 ? DType::e8m0 : DType::f32);
    for (int64_t n = 0; n < N; ++n) {
      if (f4)
        static_cast<uint8_t*>(scales.raw_data())[n] = static_cast<uint8_t>(120 + n);  // 2^-7 .. 2^8
      else
        scales.data<float>()[n] = (0.75f + 0.5f * float(n)) * (plane == 2 ? 1e3f : 1.0f);
    }
    Tensor x = Tensor::empty({K, K}, DType::f32);  // identity: row m picks column m
    for (int64_t m = 0; m < K; ++m) x.data<float>()[m * K + m] = 1.0f;
    for_each_isa([&] {
      for (int64_t rows : {int64_t{1}, int64_t{4}, K}) {  // decode and prefill paths
        Tensor out = Tensor::empty({rows, N}, DType::f32);
        ops::matmul_quantized(x.narrow(0, 0, rows), Tensor(), w, scales, 32, Tensor(), out);
        for (int64_t m = 0; m < rows; ++m)
          for (int64_t n = 0; n < N; ++n) {
            const uint8_t byte = bytes[n * (f4 ? K / 2 : K) + (f4 ? m / 2 : m)];
            const float code = f4 ? f4_e2m1_to_f32(static_cast<uint8_t>(byte >> (4 * (m & 1))))
                                  : f8_e4m3fn_to_f32(byte);
            const float scale = f4 ? e8m0_to_f32(static_cast<uint8_t*>(scales.raw_data())[n])
                                   : scales.data<float>()[n];
            const float want = code * scale, got = out.data<float>()[m * N + n];
            EXPECT_EQ(got, want) << (f4 ? "f4" : "f8") << " byte " << int(byte) << " row " << m
                                 << " col " << n;
          }
      }
      if (!f4) {
        for (uint8_t nan_code : {uint8_t{0x7F}, uint8_t{0xFF}}) {
          const uint8_t saved = bytes[5];
          bytes[5] = nan_code;  // row 0, column 5
          Tensor out = Tensor::empty({1, N}, DType::f32);
          ops::matmul_quantized(x.narrow(0, 0, 1), Tensor(), w, scales, 32, Tensor(), out);
          EXPECT_TRUE(std::isnan(out.data<float>()[0])) << int(nan_code);
          EXPECT_FALSE(std::isnan(out.data<float>()[1]));
          bytes[5] = saved;
        }
      }
    });
  }
}

// Every e8m0 scale byte (2^-127 .. 2^127 and the NaN 0xFF) reaches the output exactly, on
// the decode and the prefill paths under every ISA: the SIMD kernels convert scales with
// bit operations, not through the scalar table.
TEST(QuantKernelHwyDecode, every_e8m0_scale_is_applied_exactly_under_every_isa) {
  const int64_t N = 256, K = 64;
  Tensor codes = Tensor::empty({N, K / 2}, DType::u8);
  std::memset(codes.raw_data(), 0x22, static_cast<size_t>(codes.nbytes()));  // every nibble 1.0
  Tensor w = Tensor::from_storage(codes.storage(), DType::f4_e2m1, {N, K});
  Tensor scales = Tensor::empty({N, K / 32}, DType::e8m0);
  auto* sb = static_cast<uint8_t*>(scales.raw_data());
  for (int64_t n = 0; n < N; ++n) sb[n * 2] = sb[n * 2 + 1] = static_cast<uint8_t>(n);
  Tensor x = Tensor::zeros({8, K}, DType::f32);
  for (int64_t m = 0; m < 8; ++m)
    x.data<float>()[m * K + 3 + 32 * (m & 1)] = 1.0f;  // one value of one group
  for_each_isa([&] {
    for (int64_t rows : {int64_t{1}, int64_t{8}}) {  // decode and prefill paths (f4: 1-7 decode)
      Tensor out = Tensor::empty({rows, N}, DType::f32);
      ops::matmul_quantized(x.narrow(0, 0, rows), Tensor(), w, scales, 32, Tensor(), out);
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t n = 0; n < N; ++n) {
          const float want = e8m0_to_f32(static_cast<uint8_t>(n)),
                      got = out.data<float>()[m * N + n];
          if (n == 255) {
            EXPECT_TRUE(std::isnan(got)) << "row " << m;
          } else {
            EXPECT_EQ(got, want) << "scale byte " << n << " row " << m;
          }
        }
    }
  });
}

// MXFP4 codes with a scale per 8 values (not the decode kernels' 32, so four scales inside
// each 32 values the kernels permute): the prefill path at every M, each element times its
// own group's scale, rows bitwise equal alone and in a batch.
TEST(QuantKernelHwyDecode, f4_scale_groups_of_8_take_the_float_path) {
  const int64_t N = 20, K = 128, group = 8, S = K / group;
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> byte(0, 255), exponent(120, 132);
  Tensor codes = Tensor::empty({N, K / 2}, DType::u8);
  auto* cb = static_cast<uint8_t*>(codes.raw_data());
  for (int64_t i = 0; i < N * K / 2; ++i) cb[i] = static_cast<uint8_t>(byte(rng));
  Tensor w = Tensor::from_storage(codes.storage(), DType::f4_e2m1, {N, K});
  Tensor scales = Tensor::empty({N, S}, DType::e8m0);
  auto* sb = static_cast<uint8_t*>(scales.raw_data());
  for (int64_t i = 0; i < N * S; ++i) sb[i] = static_cast<uint8_t>(exponent(rng));
  Tensor x = Tensor::empty({6, K}, DType::f32);
  for (int64_t i = 0; i < 6 * K; ++i) x.data<float>()[i] = std::sin(0.29f * float(i));
  for_each_isa([&] {
    Tensor out6 = Tensor::empty({6, N}, DType::f32), out1 = Tensor::empty({1, N}, DType::f32);
    ops::matmul_quantized(x, Tensor(), w, scales, group, Tensor(), out6);
    ops::matmul_quantized(x.narrow(0, 3, 1), Tensor(), w, scales, group, Tensor(), out1);
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_EQ(out1.data<float>()[n], out6.data<float>()[3 * N + n]);
      for (int64_t m = 0; m < 6; ++m) {
        double ref = 0;
        for (int64_t k = 0; k < K; ++k)
          ref += double(x.data<float>()[m * K + k]) *
                 f4_e2m1_to_f32(static_cast<uint8_t>(cb[n * K / 2 + k / 2] >> (4 * (k & 1)))) *
                 e8m0_to_f32(sb[n * S + k / group]);
        EXPECT_NEAR(out6.data<float>()[m * N + n], ref, 1e-4 * (std::fabs(ref) + 1.0));
      }
    }
  });
}

// A scale group the decode kernels cannot take (24 values: a vector would span two
// scales) runs through the dequantize-then-float path, still exact to the reference and
// batch-invariant.
TEST(QuantKernelHwyDecode, scale_groups_not_a_multiple_of_16_take_the_float_path) {
  const int64_t N = 20, K = 72, group = 24, S = 3;
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> code(0, 0x7E);
  Tensor codes = Tensor::empty({N, K}, DType::u8);
  auto* bytes = static_cast<uint8_t*>(codes.raw_data());
  for (int64_t i = 0; i < N * K; ++i)
    bytes[i] = static_cast<uint8_t>(code(rng) | (i % 3 == 0 ? 0x80 : 0));
  Tensor w = Tensor::from_storage(codes.storage(), DType::f8_e4m3fn, {N, K});
  Tensor scales = Tensor::empty({N, S}, DType::f32);
  for (int64_t i = 0; i < N * S; ++i) scales.data<float>()[i] = 0.01f * float(i + 1);
  Tensor x = Tensor::empty({6, K}, DType::f32);
  for (int64_t i = 0; i < 6 * K; ++i) x.data<float>()[i] = std::sin(0.37f * float(i));
  for_each_isa([&] {
    Tensor out6 = Tensor::empty({6, N}, DType::f32), out1 = Tensor::empty({1, N}, DType::f32);
    ops::matmul_quantized(x, Tensor(), w, scales, group, Tensor(), out6);
    ops::matmul_quantized(x.narrow(0, 2, 1), Tensor(), w, scales, group, Tensor(), out1);
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_EQ(out1.data<float>()[n], out6.data<float>()[2 * N + n]);
      for (int64_t m = 0; m < 6; ++m) {
        double ref = 0;
        for (int64_t k = 0; k < K; ++k)
          ref += double(x.data<float>()[m * K + k]) * f8_e4m3fn_to_f32(bytes[n * K + k]) *
                 scales.data<float>()[n * S + k / group];
        EXPECT_NEAR(out6.data<float>()[m * N + n], ref, 1e-4 * (std::fabs(ref) + 1.0));
      }
    }
  });
}

}  // namespace
}  // namespace refit
