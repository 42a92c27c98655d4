// Quantized matmul kernels (FP8 W8A16 / W8A8, MXFP4, Q8_0; plain and shuffled_16x16)
// against a scalar dequantize-then-matmul reference in double, to 1e-4 relative; and
// dispatch picking them from the tensors (law L3).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "core/error.h"
#include "core/float_formats.h"
#include "kernels/matmul_quantized.h"
#include "kernels/quant/quant_scheme.h"
#include "quant_test_util.h"
#include "weights/layout_transform.h"

namespace refit {
namespace {

using testing::QuantWeight;

QuantWeight make_weight(const QuantScheme& s, int64_t n, int64_t k, bool shuffled, uint32_t seed) {
  return testing::make_quant_weight(s, n, k, shuffled, seed, 7);
}

using testing::KernelCase;

class QuantKernel : public ::testing::TestWithParam<KernelCase> {};

TEST_P(QuantKernel, matches_dequantize_then_matmul_reference) {
  const KernelCase c = GetParam();
  const QuantScheme s = parse_quant_scheme(c.scheme);
  QuantWeight w = make_weight(s, c.n, c.k, c.shuffled, 7);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{17}}) {
    Tensor x = Tensor::empty({m, c.k}, DType::f32);
    for (int64_t i = 0; i < m * c.k; ++i) x.data<float>()[i] = dist(rng);
    Tensor bias = Tensor::empty({c.n}, DType::f32);
    for (int64_t i = 0; i < c.n; ++i) bias.data<float>()[i] = dist(rng);
    // The activations the kernel sees: f32, or per-token e4m3 codes for W8A8.
    std::vector<float> xr = x.to_floats();
    Tensor xin = x, x_scale;
    if (s.w8a8) {
      xin = Tensor::empty({m, c.k}, DType::f8_e4m3fn);
      x_scale = Tensor::empty({m}, DType::f32);
      ops::quantize_per_token_fp8(x, xin, x_scale);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t i = 0; i < c.k; ++i)
          xr[r * c.k + i] = f8_e4m3fn_to_f32(static_cast<uint8_t*>(xin.raw_data())[r * c.k + i]) *
                            x_scale.data<float>()[r];
    }
    Tensor out = Tensor::empty({m, c.n}, DType::f32);
    ops::matmul_quantized(xin, x_scale, w.codes, w.scales, s.group(c.k), bias, out);
    double max_ref = 0, max_diff = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < c.n; ++j) {
        double ref = bias.data<float>()[j];
        for (int64_t i = 0; i < c.k; ++i)
          ref += double(xr[r * c.k + i]) * double(w.dequantized[j * c.k + i]);
        max_ref = std::max(max_ref, std::fabs(ref));
        max_diff = std::max(max_diff, std::fabs(ref - out.data<float>()[r * c.n + j]));
      }
    EXPECT_LE(max_diff, 1e-4 * max_ref)
        << c.scheme << " M " << m << ": max |diff| " << max_diff << " of " << max_ref;
  }
}

std::vector<KernelCase> kernel_cases() {
  std::vector<KernelCase> cases;
  for (const char* scheme : {"fp8-tensor", "fp8-channel", "fp8-block", "fp8-channel-w8a8",
                             "fp8-block-w8a8", "mxfp4", "q8_0"})
    for (bool shuffled : {false, true}) {
      cases.push_back({scheme, shuffled, 48, 256});
      cases.push_back({scheme, shuffled, 32, 320});  // fp8-block: a partial 64-column block
      if (!shuffled) cases.push_back({scheme, shuffled, 40, 96});  // N not a multiple of 16
      // Rows of 1 and 2 KiB: the W8A8 kernel reads four rows from four 4 KiB pages per
      // pass (then the rows after them); N 40 ends in a partial tile read row by row.
      if (!shuffled && std::string(scheme).find("w8a8") != std::string::npos) {
        cases.push_back({scheme, shuffled, 40, 2048});
        cases.push_back({scheme, shuffled, 48, 1024});
      }
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantKernel, ::testing::ValuesIn(kernel_cases()),
                         [](const auto& info) {
                           std::string name = info.param.scheme +
                                              (info.param.shuffled ? "_shuffled" : "_plain") + "_" +
                                              std::to_string(info.param.n) + "x" +
                                              std::to_string(info.param.k);
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

TEST(QuantKernelDispatch, kernels_are_chosen_by_code_dtype_and_layout) {
  const QuantScheme s = parse_quant_scheme("mxfp4");
  QuantWeight plain = make_weight(s, 32, 128, false, 1),
              shuffled = make_weight(s, 32, 128, true, 1);
  Tensor x = Tensor::empty({2, 128}, DType::f32), out = Tensor::empty({2, 32}, DType::f32);
  auto pick = [&](const QuantWeight& w) {
    const Tensor* args[] = {&x, nullptr, &w.codes, &w.scales, nullptr, &out};
    Tensor none;
    args[1] = &none;
    args[4] = &none;
    return KernelRegistry::global().select("matmul_quantized", args).name;
  };
  EXPECT_EQ(pick(plain),
            "matmul_quantized.cpu.hwy_mxfp4_plain");  // SIMD kernels rank above the scalar ones
  EXPECT_EQ(pick(shuffled), "matmul_quantized.cpu.hwy_mxfp4_shuffled_16x16");
  // Same values, either layout.
  Tensor out2 = Tensor::empty({2, 32}, DType::f32);
  for (int i = 0; i < 256; ++i) x.data<float>()[i] = std::sin(float(i));
  ops::matmul_quantized(x, Tensor(), plain.codes, plain.scales, 32, Tensor(), out);
  ops::matmul_quantized(x, Tensor(), shuffled.codes, shuffled.scales, 32, Tensor(), out2);
  EXPECT_EQ(out.to_floats(), out2.to_floats());
  // Shuffled codes with plain-layout scales: no kernel takes it, and the error says why.
  Tensor plain_scales = plain.scales;
  try {
    ops::matmul_quantized(x, Tensor(), shuffled.codes, plain_scales, 32, Tensor(), out);
    ADD_FAILURE() << "mismatched scale layout must be refused";
  } catch (const DispatchError& e) {
    EXPECT_NE(std::string(e.what()).find("w_scale"), std::string::npos) << e.what();
  }
  // Q8_0 codes with e8m0 scales: refused by dtype.
  QuantWeight q8 = make_weight(parse_quant_scheme("q8_0"), 32, 128, false, 2);
  EXPECT_THROW(ops::matmul_quantized(x, Tensor(), q8.codes, plain.scales, 32, Tensor(), out),
               DispatchError);
  // W8A8 needs the per-token scale.
  QuantWeight f8 = make_weight(parse_quant_scheme("fp8-channel"), 32, 128, false, 3);
  Tensor xq = Tensor::empty({2, 128}, DType::f8_e4m3fn);
  EXPECT_THROW(ops::matmul_quantized(xq, Tensor(), f8.codes, f8.scales, 128, Tensor(), out),
               DispatchError);
  // Shape errors name the argument.
  EXPECT_THROW(ops::matmul_quantized(x, Tensor(), f8.codes, f8.scales, 32, Tensor(), out), Error);
}

}  // namespace
}  // namespace refit
