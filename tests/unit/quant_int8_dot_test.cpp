// The integer-dot W8A8 kernels (q8_0-w8a8, mxfp4-w8a8; kernels/cpu/matmul_int8_dot.h):
// the AVX-512 VNNI kernel (and AMX, for 16 rows and more) and the AVX2 one, each run under
// the REFIT_CPU_ISA cap that selects it, equal the scalar definition bit for bit
// (plain, shuffled and interleaved weights, odd shapes, every code incl. Q8_0's -128, every e8m0
// scale incl. NaN); both agree with a dequantize-then-matmul of the quantized activations in double
// to 1e-4; each output row is bitwise the same whatever M is, and whatever the layout; the
// activation quantizer rounds ties to even and marks non-finite blocks; REFIT_CPU_ISA avx2
// dispatches to the AVX2 kernel and below that to the definition.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "core/float_formats.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/matmul_int8_dot.h"
#include "kernels/matmul_quantized.h"
#include "quant_test_util.h"
#include "weights/layout_transform.h"

namespace refit {
namespace {

using testing::make_quant_weight;
using testing::QuantWeight;

struct Activations {
  Tensor x, xq, xd;
};

Activations make_activations(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Activations a;
  a.x = Tensor::empty({m, k}, DType::f32);
  for (int64_t i = 0; i < m * k; ++i)
    a.x.data<float>()[i] = dist(rng) * (1.0f + static_cast<float>(i % 3));
  a.xq = Tensor::empty({m, k}, DType::i8);
  a.xd = Tensor::empty({m, k / 32}, DType::f32);
  ops::quantize_per_block_q8(a.x, a.xq, a.xd);
  return a;
}

const Kernel& selected(const Tensor& xq, const Tensor& xd, const QuantWeight& w, const Tensor& bias,
                       const Tensor& out) {
  const Tensor* args[] = {&xq, &xd, &w.codes, &w.scales, &bias, &out};
  return KernelRegistry::global().select("matmul_quantized", args);
}

// The scalar definition for the same arguments: the selected name without its ISA.
kernels::MatmulQuantizedFn definition_kernel(const std::string& name) {
  std::string def = name;
  for (const std::string isa : {"avx512vnni_", "avx2_"})
    if (const size_t at = def.find(isa); at != std::string::npos) def.erase(at, isa.size());
  for (const Kernel* k : KernelRegistry::global().kernels("matmul_quantized"))
    if (k->name == def) return reinterpret_cast<kernels::MatmulQuantizedFn>(k->fn);
  ADD_FAILURE() << "no kernel " << def;
  return nullptr;
}

// The bits of each f32, every NaN as one value (which NaN payload and sign an operation
// passes on is not part of the definition).
std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> b(static_cast<size_t>(t.numel()));
  std::memcpy(b.data(), t.raw_data(), b.size() * 4);
  for (uint32_t& v : b)
    if ((v & 0x7F800000u) == 0x7F800000u && (v & 0x7FFFFFu) != 0) v = 0x7FC00000u;
  return b;
}

// The SIMD kernels' ISA caps this CPU can run ("avx3" for AVX-512 VNNI, "avx2"), each with
// the name part its kernels carry; `body` runs under each cap, and the cap in force before
// (REFIT_CPU_ISA or none) is put back.
struct SimdIsa {
  std::string cap, name_part;
};
std::vector<SimdIsa> simd_isas() {
  std::vector<SimdIsa> out;
  if (cpu::int8dot::avx512_vnni_on_cpu()) out.push_back({"avx3", "avx512vnni_"});
  if (cpu::int8dot::avx2_int8_on_cpu()) out.push_back({"avx2", "avx2_"});
  return out;
}
void restore_isa() {
  const char* env = std::getenv("REFIT_CPU_ISA");
  cpu::set_cpu_isa(env && *env ? env : cpu::cpu_isas_available().front());
}

Tensor run(const Tensor& xq, const Tensor& xd, const QuantWeight& w, const Tensor& bias) {
  Tensor out = Tensor::empty({xq.size(0), w.codes.size(0)}, DType::f32);
  ops::matmul_quantized(xq, xd, w.codes, w.scales, 32, bias, out);
  return out;
}

struct Case {
  const char* scheme;
  bool shuffled;
  int64_t n, k;
};

// The same Q8_0 weight with its codes in Layout::interleaved_4x16 (scales as they are).
QuantWeight interleaved(const QuantWeight& plain) {
  QuantWeight w = plain;
  Tensor bytes = Tensor::from_storage(plain.codes.storage(), DType::u8, plain.codes.shape());
  const Tensor mixed = interleave_4x16(bytes);
  w.codes = Tensor::from_storage(mixed.storage(), DType::i8, plain.codes.shape());
  w.codes.set_layout(Layout::interleaved_4x16);
  return w;
}

TEST(Int8DotKernels, simd_equals_the_definition_bitwise_and_dequantized_matmul_to_1e4) {
  const std::vector<SimdIsa> isas = simd_isas();
  if (isas.empty()) std::printf("note: no AVX2 or AVX-512 VNNI here; only the definition runs\n");
  const Case cases[] = {
      {"q8_0-w8a8", false, 48, 512},
      {"q8_0-w8a8", true, 48, 512},  // 16 blocks
      {"q8_0-w8a8", false, 37, 544},
      {"q8_0-w8a8", true, 32, 544},  // 17: one tail block
      {"q8_0-w8a8", false, 19, 96},
      {"q8_0-w8a8", false, 1, 32},  // tail only
      {"q8_0-w8a8", false, 20, 1056},
      {"mxfp4-w8a8", false, 48, 512},  // 33 blocks
      {"mxfp4-w8a8", true, 48, 512},
      {"mxfp4-w8a8", false, 37, 608},  // 19: three tail blocks
      {"mxfp4-w8a8", true, 32, 576},
      {"mxfp4-w8a8", false, 5, 64},
      {"mxfp4-w8a8", false, 17, 1024},
      // Rows of 1 or 2 KiB: four rows from four 4 KiB pages per pass, then the rows after
      // them (16-row tiles; N 40 ends in an 8-row tile, by page for Q8_0 at K 2048 and row
      // by row for MXFP4).
      {"q8_0-w8a8", false, 40, 2048},
      {"q8_0-w8a8", false, 48, 1024},
      {"mxfp4-w8a8", false, 40, 2048},
      {"mxfp4-w8a8", false, 32, 4096},
      // Shuffled tiles read in place, several tiles (with bytes requested ahead): 64 blocks,
      // and 66 (two past a group of 16, and two past a group of 4 for MXFP4's re-ordered
      // activations).
      {"q8_0-w8a8", true, 64, 2048},
      {"q8_0-w8a8", true, 48, 2112},
      {"mxfp4-w8a8", true, 64, 2048},
      {"mxfp4-w8a8", true, 48, 2112},
  };
  // MXFP4 once with each nibble decoder the CPU has (vpermb needs VBMI; vpshufb always).
  const bool vbmi = cpu::int8dot::vbmi_in_use();
  for (const SimdIsa& isa : isas)
    for (const bool use_vbmi : {true, false})
      for (const Case& c : cases)
        // Every plain Q8_0 case once more with the codes interleaved (runs of 16 blocks read in
        // place, the tail blocks plain).
        for (const bool il : {false, true}) {
          if (!use_vbmi && (!vbmi || isa.cap != "avx3" || std::string(c.scheme) != "mxfp4-w8a8"))
            continue;
          cpu::set_cpu_isa(isa.cap);
          if (il && (c.shuffled || std::string(c.scheme) != "q8_0-w8a8")) continue;
          cpu::int8dot::set_vbmi_allowed(use_vbmi);
          SCOPED_TRACE(fmt::format("{}: {} {} N {} K {}{}", isa.cap, c.scheme,
                                   il           ? "interleaved"
                                   : c.shuffled ? "shuffled"
                                                : "plain",
                                   c.n, c.k, use_vbmi ? "" : " (vpshufb path)"));
          const QuantScheme s = parse_quant_scheme(c.scheme);
          const QuantWeight plain = make_quant_weight(s, c.n, c.k, false, 11);
          const QuantWeight w =
              il ? interleaved(plain) : make_quant_weight(s, c.n, c.k, c.shuffled, 11);
          Tensor bias = Tensor::empty({c.n}, DType::f32);
          for (int64_t i = 0; i < c.n; ++i)
            bias.data<float>()[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
          // 17 and 33 rows: the AMX kernel where the CPU has it (16 rows and more).
          for (int64_t m :
               {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{9}, int64_t{17}, int64_t{33}}) {
            const Activations a = make_activations(m, c.k, static_cast<uint32_t>(m));
            Tensor out = Tensor::empty({m, c.n}, DType::f32);
            const Kernel& k = selected(a.xq, a.xd, w, bias, out);
            EXPECT_NE(k.name.find(isa.name_part), std::string::npos) << k.name;
            EXPECT_EQ(k.name.find("interleaved_4x16") != std::string::npos, il) << k.name;
            out = run(a.xq, a.xd, w, bias);
            // The definition, bit for bit.
            Tensor def = Tensor::empty({m, c.n}, DType::f32);
            definition_kernel(k.name)(a.xq, a.xd, w.codes, w.scales, 32, bias, def);
            EXPECT_EQ(bits(out), bits(def));
            // The plain layout's bits.
            if (c.shuffled || il) {
              EXPECT_EQ(bits(out), bits(run(a.xq, a.xd, plain, bias)));
            }
            // Dequantize-then-matmul in double, to 1e-4 of the sum of |products|.
            for (int64_t r = 0; r < m; ++r)
              for (int64_t n = 0; n < c.n; ++n) {
                double ref = bias.data<float>()[n], mag = std::fabs(ref);
                for (int64_t kk = 0; kk < c.k; ++kk) {
                  const double xv = double(a.xq.data<int8_t>()[r * c.k + kk]) *
                                    a.xd.data<float>()[r * (c.k / 32) + kk / 32];
                  ref += xv * w.dequantized[n * c.k + kk];
                  mag += std::fabs(xv * w.dequantized[n * c.k + kk]);
                }
                ASSERT_LE(std::fabs(out.data<float>()[r * c.n + n] - ref), 1e-4 * mag)
                    << "row " << r << " col " << n;
              }
            // Each row alone: the same bits (batch invariance).
            for (int64_t r = 0; r < m; ++r) {
              const Tensor one = run(a.xq.narrow(0, r, 1), a.xd.narrow(0, r, 1), w, bias);
              std::vector<uint32_t> all = bits(out);
              EXPECT_EQ(bits(one),
                        std::vector<uint32_t>(all.begin() + r * c.n, all.begin() + (r + 1) * c.n))
                  << "row " << r;
            }
          }
        }
  cpu::int8dot::set_vbmi_allowed(true);
  restore_isa();
}

// Q8_0 codes over the whole byte range (-128 included: ggml never writes it, a GGUF may
// hold it) and activation codes at +-127: the unsigned-offset trick (AVX-512) and the sign
// trick (AVX2) stay exact. Activation codes of -128 (the quantizer never writes them; the
// AVX2 kernel's sign trick cannot take them and hands such a call to the definition) give
// the definition's bits too.
TEST(Int8DotKernels, every_q8_0_code_and_extreme_activations_are_exact) {
  for (const SimdIsa& isa : simd_isas())
    for (const bool with_min : {false, true}) {
      SCOPED_TRACE(isa.cap + (with_min ? ", activations holding -128" : ""));
      cpu::set_cpu_isa(isa.cap);
      const int64_t n = 16, k = 512;
      QuantWeight w = make_quant_weight(parse_quant_scheme("q8_0"), n, k, false, 5);
      for (int64_t i = 0; i < n * k; ++i)
        static_cast<uint8_t*>(w.codes.raw_data())[i] = static_cast<uint8_t>(i * 7 + i / 256);
      Tensor xq = Tensor::empty({2, k}, DType::i8), xd = Tensor::empty({2, k / 32}, DType::f32);
      for (int64_t i = 0; i < 2 * k; ++i)
        xq.data<int8_t>()[i] =
            static_cast<int8_t>(i % 3 == 0   ? 127
                                : i % 3 == 1 ? (with_min && i % 5 == 0 ? -128 : -127)
                                             : i % 255 - 127);
      for (int64_t i = 0; i < 2 * k / 32; ++i)
        xd.data<float>()[i] = 1.0f / static_cast<float>(1 + i);
      const Tensor out = run(xq, xd, w, Tensor());
      Tensor def = Tensor::empty({2, n}, DType::f32);
      definition_kernel(selected(xq, xd, w, Tensor(), def).name)(xq, xd, w.codes, w.scales, 32,
                                                                 Tensor(), def);
      EXPECT_EQ(bits(out), bits(def));
      EXPECT_EQ(bits(run(xq, xd, interleaved(w), Tensor())),
                bits(def));  // the same codes, interleaved
      // An exact integer check on one block: scale 1 everywhere.
      for (int64_t i = 0; i < n * (k / 32); ++i) w.scales.data<uint16_t>()[i] = f32_to_f16(1.0f);
      for (int64_t i = 0; i < 2 * k / 32; ++i) xd.data<float>()[i] = 1.0f;
      const Tensor exact = run(xq, xd, w, Tensor());
      for (int64_t r = 0; r < 2; ++r)
        for (int64_t j = 0; j < n; ++j) {
          int64_t sum = 0;
          for (int64_t kk = 0; kk < k; ++kk)
            sum += int64_t{xq.data<int8_t>()[r * k + kk]} *
                   static_cast<int8_t>(static_cast<uint8_t*>(w.codes.raw_data())[j * k + kk]);
          EXPECT_EQ(exact.data<float>()[r * n + j], static_cast<float>(sum)) << r << " " << j;
        }
    }
  restore_isa();
}

// All 256 e8m0 scale bytes (2^-127 and NaN included) and all 16 e2m1 codes, in the plain
// and the shuffled layout (each has its own scale-product code).
TEST(Int8DotKernels, every_mxfp4_code_and_scale_matches_the_definition) {
  const int64_t n = 32, k = 512;
  for (const bool shuffled : {false, true}) {
    SCOPED_TRACE(shuffled ? "shuffled" : "plain");
    QuantWeight w = make_quant_weight(parse_quant_scheme("mxfp4"), n, k, shuffled, 9);
    for (int64_t i = 0; i < n * k / 2; ++i)
      static_cast<uint8_t*>(w.codes.raw_data())[i] = static_cast<uint8_t>(i * 37);
    // The 256 scale bytes in storage order, twice (plain: rows 15 and 31 hold 255).
    for (int64_t i = 0; i < n * (k / 32); ++i)
      w.scales.data<uint8_t>()[i] = static_cast<uint8_t>(i);
    for (const SimdIsa& isa : simd_isas())
      for (const bool use_vbmi : {true, false})        // both nibble decoders (see above)
        for (int64_t m : {int64_t{3}, int64_t{17}}) {  // the VNNI kernel, and AMX where present
          cpu::set_cpu_isa(isa.cap);
          cpu::int8dot::set_vbmi_allowed(use_vbmi);
          SCOPED_TRACE(isa.cap + (use_vbmi ? ": vpermb where the CPU has VBMI" : ": vpshufb"));
          const Activations a = make_activations(m, k, 4);
          const Tensor out = run(a.xq, a.xd, w, Tensor());
          Tensor def = Tensor::empty({m, n}, DType::f32);
          definition_kernel(selected(a.xq, a.xd, w, Tensor(), def).name)(
              a.xq, a.xd, w.codes, w.scales, 32, Tensor(), def);
          EXPECT_EQ(bits(out), bits(def)) << "M " << m;
          if (shuffled) continue;  // there the largest scales share rows with small ones: inf - inf
          int nan = 0;
          for (float v : out.to_floats()) nan += std::isnan(v);
          EXPECT_EQ(nan, 2 * m) << "only the two columns holding the NaN scale (byte 255) are NaN";
        }
  }
  cpu::int8dot::set_vbmi_allowed(true);
  restore_isa();
}

TEST(Int8DotKernels, activation_quantizer_rounds_ties_to_even_and_marks_non_finite_blocks) {
  Tensor x = Tensor::zeros({1, 96}, DType::f32);
  float* v = x.data<float>();
  v[0] = 127.0f;  // block 0: scale exactly 1
  v[1] = 2.5f, v[2] = 3.5f, v[3] = -2.5f, v[4] = 0.49f, v[5] = -126.5f;
  // block 1: all zero. block 2: an infinity.
  v[64] = 1.0f, v[65] = INFINITY;
  Tensor xq = Tensor::empty({1, 96}, DType::i8), xd = Tensor::empty({1, 3}, DType::f32);
  ops::quantize_per_block_q8(x, xq, xd);
  const int8_t* q = xq.data<int8_t>();
  EXPECT_EQ(xd.data<float>()[0], 1.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], 2);
  EXPECT_EQ(q[2], 4);
  EXPECT_EQ(q[3], -2);
  EXPECT_EQ(q[4], 0);
  EXPECT_EQ(q[5], -126);
  EXPECT_EQ(xd.data<float>()[1], 0.0f);
  for (int i = 32; i < 64; ++i) EXPECT_EQ(q[i], 0);
  EXPECT_TRUE(std::isnan(xd.data<float>()[2]));
  // Through a matmul: the non-finite block makes the output NaN, as f32 activations would.
  const QuantWeight w = make_quant_weight(parse_quant_scheme("q8_0"), 4, 96, false, 3);
  for (float o : run(xq, xd, w, Tensor()).to_floats()) EXPECT_TRUE(std::isnan(o));
  // Random data: every code within half a step of x / d.
  const Activations a = make_activations(3, 256, 8);
  for (int64_t i = 0; i < 3 * 256; ++i) {
    const float d = a.xd.data<float>()[i / 32];
    EXPECT_LE(std::fabs(a.xq.data<int8_t>()[i] - a.x.data<float>()[i] / d), 0.5f + 1e-4f);
  }
}

TEST(Int8DotKernels, cpu_isa_caps_choose_the_avx2_kernel_then_the_definition) {
  const QuantWeight w = make_quant_weight(parse_quant_scheme("q8_0"), 16, 64, false, 1);
  const Activations a = make_activations(1, 64, 1);
  Tensor out = Tensor::empty({1, 16}, DType::f32);
  const Tensor simd_out = run(a.xq, a.xd, w, Tensor());
  // An interleaved weight (two runs of 16 blocks and a tail) runs there too, un-interleaved
  // a tile at a time, with the same bits.
  const QuantWeight wide = make_quant_weight(parse_quant_scheme("q8_0"), 32, 1056, false, 2);
  const QuantWeight mixed = interleaved(wide);
  const Activations b = make_activations(2, 1056, 3);
  Tensor out2 = Tensor::empty({2, 32}, DType::f32);
  const Tensor simd_out2 = run(b.xq, b.xd, mixed, Tensor());
  for (const std::string cap : {"avx2", "sse4"}) {
    SCOPED_TRACE(cap);
    cpu::set_cpu_isa(cap);
    const std::string part = cap == "avx2" && cpu::int8dot::avx2_int8_on_cpu() ? "avx2_" : "";
    EXPECT_EQ(selected(a.xq, a.xd, w, Tensor(), out).name,
              "matmul_quantized.cpu." + part + "int8_q8_0_plain");
    EXPECT_EQ(bits(run(a.xq, a.xd, w, Tensor())), bits(simd_out));
    EXPECT_EQ(selected(b.xq, b.xd, mixed, Tensor(), out2).name,
              "matmul_quantized.cpu." + part + "int8_q8_0_interleaved_4x16");
    EXPECT_EQ(bits(run(b.xq, b.xd, mixed, Tensor())), bits(simd_out2));
    EXPECT_EQ(bits(run(b.xq, b.xd, wide, Tensor())), bits(simd_out2));
  }
  restore_isa();
}

// The price of int8 activations, stated: against the same weights with f32 activations
// (W8A16) the outputs differ by a normalised squared error well under 1e-3.
TEST(Int8DotKernels, int8_activations_stay_close_to_f32_activations) {
  for (const char* scheme : {"q8_0", "mxfp4"}) {
    const QuantWeight w = make_quant_weight(parse_quant_scheme(scheme), 64, 1024, false, 2);
    const Activations a = make_activations(4, 1024, 6);
    Tensor f32_out = Tensor::empty({4, 64}, DType::f32);
    ops::matmul_quantized(a.x, Tensor(), w.codes, w.scales, 32, Tensor(), f32_out);
    const Tensor int8_out = run(a.xq, a.xd, w, Tensor());
    double num = 0, den = 0;
    for (int64_t i = 0; i < 4 * 64; ++i) {
      const double d = double(int8_out.data<float>()[i]) - f32_out.data<float>()[i];
      num += d * d;
      den += double(f32_out.data<float>()[i]) * f32_out.data<float>()[i];
    }
    std::printf("%s: nmse of int8 vs f32 activations %.3g\n", scheme, num / den);
    EXPECT_LT(num / den, 1e-3) << scheme;
    EXPECT_GT(num / den, 0.0) << scheme << ": int8 activations cannot be exact";
  }
}

TEST(Int8DotKernels, bad_activation_scales_are_refused_with_the_expected_shape) {
  const QuantWeight w = make_quant_weight(parse_quant_scheme("q8_0"), 16, 64, false, 1);
  Tensor xq = Tensor::zeros({2, 64}, DType::i8), wrong = Tensor::zeros({2}, DType::f32);
  Tensor out = Tensor::empty({2, 16}, DType::f32);
  try {
    ops::matmul_quantized(xq, wrong, w.codes, w.scales, 32, Tensor(), out);
    FAIL() << "accepted x_scale [2] for int8 activations";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[M, K / 32] = [2, 2]"), std::string::npos) << e.what();
  }
}

// The AVX-512 activation quantizer against the definition (what dispatch picks below
// avx3): the same codes and scales on random rows, exact ties (x / d = n + 0.5 at d = 1),
// tiny and huge magnitudes, zero blocks and blocks holding inf or NaN.
TEST(Int8DotKernels, avx512_activation_quantizer_matches_the_definition_bit_for_bit) {
  if (!cpu::int8dot::avx512_vnni_usable()) GTEST_SKIP() << "no AVX-512 VNNI here";
  const int64_t M = 5, K = 32 * 24;
  Tensor x = Tensor::empty({M, K}, DType::f32);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  float* v = x.data<float>();
  for (int64_t i = 0; i < M * K; ++i) v[i] = normal(rng);
  for (int64_t k = 0; k < 32; ++k)
    v[k] = k == 0 ? 127.0f : (k % 2 ? 0.5f : -1.5f) + float(k);  // block 0: ties
  for (int64_t k = 32; k < 64; ++k) v[k] = 0.0f;                 // block 1: zeros
  v[64 + 3] = INFINITY;                                          // block 2
  v[96 + 7] = NAN;                                               // block 3
  for (int64_t k = 128; k < 160; ++k) v[k] *= 1e-38f;            // block 4: denormals
  for (int64_t k = 160; k < 192; ++k) v[k] *= 1e37f;             // block 5: huge
  auto quantize = [&](const char* expect_kernel) {
    Tensor xq = Tensor::empty({M, K}, DType::i8), xd = Tensor::empty({M, K / 32}, DType::f32);
    const std::array<const Tensor*, 3> args{&x, &xq, &xd};
    EXPECT_EQ(KernelRegistry::global().select("quantize_per_block_q8", args).name, expect_kernel);
    ops::quantize_per_block_q8(x, xq, xd);
    return std::make_pair(xq, xd);
  };
  const auto [simd_q, simd_d] = quantize("quantize_per_block_q8.cpu.avx512");
  cpu::set_cpu_isa("avx2");
  const auto [def_q, def_d] = quantize("quantize_per_block_q8.cpu");
  const char* env = std::getenv("REFIT_CPU_ISA");
  cpu::set_cpu_isa(env && *env ? env : cpu::cpu_isas_available().front());
  EXPECT_EQ(0, std::memcmp(simd_q.raw_data(), def_q.raw_data(), M * K)) << "codes differ";
  EXPECT_EQ(bits(simd_d), bits(def_d)) << "scales differ";
  EXPECT_TRUE(std::isnan(def_d.data<float>()[2]) && std::isnan(def_d.data<float>()[3]));
  EXPECT_EQ(def_d.data<float>()[1], 0.0f);
  EXPECT_EQ(def_q.data<int8_t>()[1], 2) << "1.5 rounds to even";
}

}  // namespace
}  // namespace refit
