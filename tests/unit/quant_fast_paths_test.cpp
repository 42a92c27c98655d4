// The fast quantizers (kernels/quant/quantize.h: SIMD rows, threads, fused f16/bf16 widening,
// in-place shuffled output) against the scalar specification (kernels/quant/quant_reference.h),
// byte for byte, under every SIMD target this CPU runs: random data at many magnitudes,
// every rounding tie of every e4m3 / e2m1 / Q8_0 code, subnormal inputs and products,
// zeros and -0, +-inf and NaN (where the scalar code defines the result: fp8 and MXFP4;
// Q8_0's roundf-to-int8 of a NaN is undefined behaviour in ggml and here), the MXFP4
// e8m0 exponent at both clamps, and fp8 rows whose K is no multiple of any vector width.
// Also: the result is the same for 1, 2 and 3 threads, and quantize_tensor's sources
// (f16, bf16, f64, strided) and shuffled output equal the reference on the f32 values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_formats.h"
#include "core/thread_pool.h"
#include "kernels/quant/quant_reference.h"
#include "kernels/quant/quant_scheme.h"
#include "kernels/quant/quantize.h"
#include "kernels_test_util.h"
#include "weights/layout_transform.h"

namespace refit {
namespace {

using testing::for_each_isa;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const char* const kFp8Schemes[] = {"fp8-tensor", "fp8-channel", "fp8-block"};
const char* const kAllSchemes[] = {"fp8-tensor", "fp8-channel", "fp8-block", "mxfp4", "q8_0"};

struct Quantized {
  std::vector<uint8_t> codes, scales;
};

Quantized allocate(const QuantScheme& s, int64_t n, int64_t k) {
  Quantized q;
  // Filled with a pattern so that a byte the fast path forgets to write shows up.
  q.codes.assign(static_cast<size_t>(n * code_row_bytes(s, k)), 0xA5);
  q.scales.assign(static_cast<size_t>(n * s.scale_cols(k)) * dtype_nbytes(s.scale_dtype(), 1),
                  0x5A);
  return q;
}

Quantized reference(const QuantScheme& s, const std::vector<float>& x, int64_t n, int64_t k) {
  Quantized q = allocate(s, n, k);
  quantize_rows_reference(s, x.data(), n, k, q.codes.data(), q.scales.data());
  return q;
}

Quantized fast(const QuantScheme& s, const std::vector<float>& x, int64_t n, int64_t k) {
  Quantized q = allocate(s, n, k);
  quantize_rows(s, x.data(), n, k, q.codes.data(), q.scales.data());
  return q;
}

// Byte equality, naming the first differing code with its input (a whole-buffer EXPECT_EQ
// would print megabytes).
void expect_same(const QuantScheme& s, const std::vector<float>& x, int64_t k,
                 const Quantized& want, const Quantized& got, const std::string& what) {
  ASSERT_EQ(want.codes.size(), got.codes.size());
  for (size_t i = 0; i < want.codes.size(); ++i)
    if (want.codes[i] != got.codes[i]) {
      const size_t elem = s.method == QuantMethod::mxfp4 ? 2 * i : i;
      ADD_FAILURE() << s.name() << " " << what << ": code byte " << i << " (row " << elem / k
                    << ", col " << elem % k << ", input " << x[elem] << " bits 0x" << std::hex
                    << std::bit_cast<uint32_t>(x[elem]) << ") reference 0x" << int(want.codes[i])
                    << " fast 0x" << int(got.codes[i]);
      return;
    }
  ASSERT_EQ(want.scales.size(), got.scales.size());
  for (size_t i = 0; i < want.scales.size(); ++i)
    if (want.scales[i] != got.scales[i]) {
      ADD_FAILURE() << s.name() << " " << what << ": scale byte " << i << " reference 0x"
                    << std::hex << int(want.scales[i]) << " fast 0x" << int(got.scales[i]);
      return;
    }
}

// The check every test makes: reference once, fast path under every ISA.
void check_all_isas(const QuantScheme& s, const std::vector<float>& x, int64_t n, int64_t k,
                    const std::string& what) {
  ASSERT_EQ(x.size(), static_cast<size_t>(n * k));
  const Quantized want = reference(s, x, n, k);
  for_each_isa([&] { expect_same(s, x, k, want, fast(s, x, n, k), what); });
}

std::vector<float> normal_values(size_t count, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = dist(rng) * scale * (1.0f + static_cast<float>(i % 7));
  return v;
}

TEST(QuantFastPaths, random_normal_rows_at_every_magnitude_match_the_reference) {
  // fp8-block: 130 rows = a full 128-row block and a partial one; K = 160 = a full
  // 128-column block and a partial one (and 5 blocks of 32 for MXFP4 / Q8_0).
  const int64_t n = 130, k = 160;
  for (const char* name : kAllSchemes)
    for (float scale : {1e-30f, 1e-6f, 1e-2f, 1.0f, 3.0f, 1e4f, 1e30f}) {
      const QuantScheme s = parse_quant_scheme(name);
      check_all_isas(s, normal_values(n * k, scale, 7), n, k, "scale " + std::to_string(scale));
    }
}

// Each value, its neighbours one ulp away, and its negation.
void push_with_neighbours(std::vector<float>& v, float x) {
  for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, kInf)}) {
    v.push_back(y);
    v.push_back(-y);
  }
}

// Pads to whole rows of k with zeros (so the padding does not change any amax).
int64_t pad_rows(std::vector<float>& v, int64_t k) {
  while (v.size() % k != 0) v.push_back(0.0f);
  return static_cast<int64_t>(v.size()) / k;
}

TEST(QuantFastPaths, fp8_every_e4m3_midpoint_and_code_rounds_as_the_reference) {
  // +inf as amax gives scale 1 (inf / 448 is not finite), so each value is encoded as is;
  // a row whose amax is 448 has scale 448 / 448 = 1 as well.
  for (float amax : {kInf, 448.0f}) {
    std::vector<float> v = {amax};
    for (uint32_t c = 0; c < 0x7E; ++c) {
      const float lo = f8_e4m3fn_to_f32(static_cast<uint8_t>(c)),
                  hi = f8_e4m3fn_to_f32(static_cast<uint8_t>(c + 1));
      push_with_neighbours(v, lo);
      push_with_neighbours(v, (lo + hi) / 2);  // exact in f32: the tie
    }
    v.push_back(448.0f);
    v.push_back(-448.0f);
    if (amax == kInf) {  // values past 448 would change a finite amax
      push_with_neighbours(v, 448.0f);
      for (float big : {464.0f, 480.0f, 1e6f, 3e38f, kInf}) push_with_neighbours(v, big);
      for (float tiny : {0x1p-10f, 0x1p-11f, 1e-20f, 1e-40f, 1e-45f}) push_with_neighbours(v, tiny);
      v.push_back(kNaN);
      v.push_back(-kNaN);
    }
    for (int64_t k : {static_cast<int64_t>(v.size()), int64_t{13}}) {  // one row; and rows of 13
      std::vector<float> x = v;
      if (k == 13) {  // the amax must be in every row for its scale to be 1
        x.clear();
        for (size_t i = 1; i < v.size(); ++i) {
          if (x.size() % 13 == 0) x.push_back(amax);
          x.push_back(v[i]);
        }
        while (x.size() % 13 != 0) x.push_back(0.0f);
      }
      const int64_t n = static_cast<int64_t>(x.size()) / k;
      check_all_isas(parse_quant_scheme("fp8-channel"), x, n, k,
                     "ties, amax " + std::to_string(amax));
    }
  }
}

TEST(QuantFastPaths, fp8_encoder_matches_on_a_sweep_of_all_f32_bit_patterns) {
  // Every 509th f32 bit pattern (NaNs, infinities, subnormals, both signs: 8.4M values)
  // through e4m3 at scale 1 (the row's +inf amax), in rows of 4099: ~1 per row is not
  // finite-amax, but the leading +inf keeps each row's scale at 1.
  const int64_t k = 4099;
  std::vector<float> x;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 509) {
    if (x.size() % k == 0) x.push_back(kInf);
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  }
  const int64_t n = pad_rows(x, k);
  check_all_isas(parse_quant_scheme("fp8-channel"), x, n, k, "bit sweep");
}

TEST(QuantFastPaths, mxfp4_every_e2m1_midpoint_at_several_shared_exponents) {
  // A block's first value sets amax in [4, 8), so e = 0, times 2^p: e = p. The other 31
  // are the e2m1 ties (0.25 ... 5), codes, values past 6 and their neighbours, times 2^p.
  std::vector<float> pattern;
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f,
                  6.0f, 7.0f, 0.0f})
    push_with_neighbours(pattern, t);
  for (int p : {-127, -126, -100, -10, -1, 0, 1, 5, 60, 120, 125}) {
    std::vector<float> x;
    for (float lead : {6.0f, 4.0f, 7.99f, 5.0f}) {
      size_t i = 0;
      while (i < pattern.size()) {
        x.push_back(std::ldexp(lead, p));
        for (int j = 1; j < 32; ++j, ++i)
          x.push_back(i < pattern.size() ? std::ldexp(pattern[i], p) : 0.0f);
      }
    }
    const int64_t k = 64, n = pad_rows(x, k);
    check_all_isas(parse_quant_scheme("mxfp4"), x, n, k, "2^" + std::to_string(p));
  }
}

TEST(QuantFastPaths, mxfp4_shared_exponent_clamps_and_random_bit_patterns) {
  std::vector<float> x;
  // amax = m * 2^p for every exponent an f32 has (subnormal, min normal, ..., 2^127),
  // so e = floor(log2 amax) - 2 crosses the -127 clamp and reaches its largest, 125.
  for (int p = -149; p <= 127; ++p)
    for (float m : {1.0f, 1.5f, 1.9999999f}) {
      const float amax = std::ldexp(m, p);
      if (!std::isfinite(amax) || amax == 0.0f) continue;
      x.push_back(amax);
      for (int j = 1; j < 32; ++j)
        x.push_back(amax * std::ldexp(static_cast<float>(j % 13) - 6.0f, -(j % 9)) / 8.0f);
    }
  // Whole blocks of random f32 bit patterns: NaNs (skipped by amax, sign-only codes),
  // infinities (amax inf: e = -127), subnormal products.
  std::mt19937 rng(11);
  for (int i = 0; i < 32 * 4096; ++i)
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  // All-zero, all -0, all NaN, and all-subnormal blocks.
  for (float fill : {0.0f, -0.0f, kNaN, -kNaN, 1e-45f, -3e-39f, kInf, -kInf})
    for (int j = 0; j < 32; ++j) x.push_back(j % 3 == 0 ? fill : (fill == fill ? fill / 2 : fill));
  const int64_t k = 96, n = pad_rows(x, k);
  check_all_isas(parse_quant_scheme("mxfp4"), x, n, k, "exponent extremes");
}

TEST(QuantFastPaths, q8_0_every_half_integer_tie_rounds_away_from_zero) {
  // amax 127 gives d = 1 and id = 1 exactly, so x * id is x: every k + 0.5 is a tie,
  // and 0.49999997 (whose + 0.5 rounds up in f32) must still give 0.
  std::vector<float> x;
  std::vector<float> values;
  for (int i = 0; i < 127; ++i) {
    push_with_neighbours(values, static_cast<float>(i) + 0.5f);
    push_with_neighbours(values, static_cast<float>(i));
  }
  size_t i = 0;
  while (i < values.size()) {
    x.push_back(127.0f);
    for (int j = 1; j < 32; ++j, ++i) x.push_back(i < values.size() ? values[i] : -0.0f);
  }
  // Other block scales: d = 2^p (amax 127 * 2^p) keeps the ties exact.
  const size_t one_scale = x.size();
  for (int p : {-100, -20, -1, 3, 90})
    for (size_t j = 0; j < one_scale; ++j) x.push_back(std::ldexp(x[j], p));
  const int64_t k = 64, n = pad_rows(x, k);
  check_all_isas(parse_quant_scheme("q8_0"), x, n, k, "ties");
}

TEST(QuantFastPaths, subnormals_zeros_and_signed_zero_in_every_scheme) {
  std::vector<float> x;
  // Blocks of 32: subnormals beside a normal amax; all subnormal; all zero; all -0;
  // mixed zeros and tiny normals.
  const float sub[] = {1e-45f, -1e-45f, 3e-39f, -5.9e-39f, 1.1754942e-38f, 0x1p-140f, -0x1p-127f};
  for (float amax : {1.0f, 1e-36f, 1e-38f, 0x1p-120f})
    for (int j = 0; j < 32; ++j)
      x.push_back(j == 0 ? amax : sub[j % 7] * static_cast<float>(1 + j % 3));
  for (int j = 0; j < 32; ++j) x.push_back(0.0f);
  for (int j = 0; j < 32; ++j) x.push_back(-0.0f);
  for (int j = 0; j < 32; ++j) x.push_back(j % 2 ? 0.0f : -1e-37f);
  const int64_t k = 32, n = pad_rows(x, k);
  for (const char* name : kAllSchemes) {
    const QuantScheme s = parse_quant_scheme(name);
    if (s.method == QuantMethod::q8_0) {
      // Q8_0 needs a finite 1 / d: blocks whose amax is below ~3.7e-37 make it infinite
      // and the code roundf(x * inf) undefined; keep the blocks with a large enough amax.
      std::vector<float> q8;
      for (int64_t r = 0; r < n; ++r) {
        float amax = 0.0f;
        for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(x[r * k + c]));
        if (amax == 0.0f || amax > 4e-37f)
          q8.insert(q8.end(), x.begin() + r * k, x.begin() + (r + 1) * k);
      }
      check_all_isas(s, q8, static_cast<int64_t>(q8.size()) / k, k, "subnormals");
      continue;
    }
    check_all_isas(s, x, n, k, "subnormals");
  }
}

TEST(QuantFastPaths, fp8_infinities_and_nans_in_every_scale_shape) {
  // NaN is skipped by amax and becomes 0x7F / 0xFF; an infinite amax makes the scale 1.
  const int64_t k = 37;
  for (const char* name : kFp8Schemes) {
    std::vector<float> x = normal_values(140 * k, 2.0f, 3);
    x[5] = kNaN;
    x[k + 3] = -kNaN;
    x[2 * k + 1] = kInf;
    x[7 * k + 30] = -kInf;
    x[139 * k + 36] = kNaN;
    check_all_isas(parse_quant_scheme(name), x, 140, k, "inf/nan");
  }
}

TEST(QuantFastPaths, fp8_rows_of_any_width_match_including_vector_tails) {
  for (const char* name : kFp8Schemes)
    for (int64_t k : {1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 127, 128, 129, 255, 257, 300})
      for (int64_t n : {1, 3, 129}) {
        const QuantScheme s = parse_quant_scheme(name);
        check_all_isas(s, normal_values(n * k, 0.7f, static_cast<uint32_t>(k * 131 + n)), n, k,
                       "k " + std::to_string(k) + " n " + std::to_string(n));
      }
}

TEST(QuantFastPaths, result_does_not_depend_on_the_thread_count) {
  const int before = num_threads();
  const int64_t n = 272, k = 384;
  const std::vector<float> x = normal_values(n * k, 1.0f, 5);
  for (const char* name : kAllSchemes) {
    const QuantScheme s = parse_quant_scheme(name);
    const Quantized want = reference(s, x, n, k);
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      expect_same(s, x, k, want, fast(s, x, n, k), std::to_string(threads) + " threads");
    }
  }
  set_num_threads(before);
}

// quantize_tensor as Parameter::load calls it: f16 / bf16 / f64 / column-strided sources
// and the shuffled layout equal the reference on the f32 values, then shuffled as
// shuffle_16x16 (codes) and shuffle_scales_16 (Q8_0 / MXFP4 scales) do.
TEST(QuantFastPaths, tensor_sources_and_shuffled_output_match_reference_then_shuffle) {
  const int64_t n = 48, k = 256;
  Tensor wide = Tensor::from_floats({n, 2 * k}, normal_values(n * 2 * k, 0.3f, 9));
  const struct {
    const char* what;
    Tensor rows;
  } sources[] = {
      {"f32", wide.narrow(1, 0, k).contiguous()},
      {"f16", wide.narrow(1, 0, k).to(DType::f16)},
      {"bf16", wide.narrow(1, 0, k).to(DType::bf16)},
      {"f64", wide.narrow(1, 0, k).to(DType::f64)},
      {"strided f32", wide.narrow(1, k, k)},
      {"strided bf16", wide.to(DType::bf16).narrow(1, 3, k)},
  };
  for (const char* name : kAllSchemes) {
    const QuantScheme s = parse_quant_scheme(name);
    for (const auto& src : sources) {
      SCOPED_TRACE(std::string(name) + " " + src.what);
      const std::vector<float> x = src.rows.to_floats();
      const Quantized want = reference(s, x, n, k);
      for (bool shuffled : {false, true}) {
        Quantized expected = want;
        if (shuffled) {
          const int64_t row_bytes = code_row_bytes(s, k);
          Tensor bytes = Tensor::empty({n, row_bytes}, DType::u8);
          std::memcpy(bytes.raw_data(), want.codes.data(), want.codes.size());
          Tensor tiled = shuffle_16x16(bytes);
          std::memcpy(expected.codes.data(), tiled.raw_data(), expected.codes.size());
          if (scales_follow_tiles(s))
            shuffle_scales_16(expected.scales.data(), n, s.scale_cols(k), scale_groups_per_tile(s),
                              dtype_nbytes(s.scale_dtype(), 1));
        }
        for_each_isa([&] {
          Quantized got = allocate(s, n, k);
          quantize_tensor(s, src.rows, got.codes.data(), got.scales.data(),
                          shuffled ? Layout::shuffled_16x16 : Layout::strided);
          expect_same(s, x, k, expected, got, shuffled ? "shuffled" : "plain");
        });
      }
    }
  }
}

// The interleaved layout (Q8_0 codes for the integer-dot kernel): the reference codes
// permuted within each row by interleave_4x16, the scales untouched; K = 1056 is two whole
// runs of 16 blocks and one tail block, which stays in place.
TEST(QuantFastPaths, interleaved_output_is_the_reference_then_interleave) {
  const int64_t n = 19, k = 1056;
  const Tensor rows = Tensor::from_floats({n, k}, normal_values(n * k, 0.3f, 4)).to(DType::bf16);
  const std::vector<float> x = rows.to_floats();
  for (const char* name : {"q8_0", "q8_0-w8a8"}) {
    SCOPED_TRACE(name);
    const QuantScheme s = parse_quant_scheme(name);
    const Quantized want = reference(s, x, n, k);
    Tensor bytes = Tensor::empty({n, k}, DType::u8);
    std::memcpy(bytes.raw_data(), want.codes.data(), want.codes.size());
    const Tensor mixed = interleave_4x16(bytes);
    EXPECT_EQ(mixed.layout(), Layout::interleaved_4x16);
    Quantized expected = want;
    std::memcpy(expected.codes.data(), mixed.raw_data(), expected.codes.size());
    // A byte of the first run moved, the tail block did not.
    EXPECT_EQ(expected.codes[64 * 1 + 4 * 2], want.codes[32 * 2 + 4 * 1]);
    EXPECT_EQ(std::vector<uint8_t>(expected.codes.begin() + 1024, expected.codes.begin() + 1056),
              std::vector<uint8_t>(want.codes.begin() + 1024, want.codes.begin() + 1056));
    for_each_isa([&] {
      Quantized got = allocate(s, n, k);
      quantize_tensor(s, rows, got.codes.data(), got.scales.data(), Layout::interleaved_4x16);
      expect_same(s, x, k, expected, got, "interleaved");
    });
    // And back.
    EXPECT_EQ(
        std::memcmp(deinterleave_4x16(mixed).raw_data(), want.codes.data(), want.codes.size()), 0);
  }
}

TEST(QuantFastPaths, refuses_what_the_scheme_refuses) {
  std::vector<float> x(3 * 40, 1.0f);
  Quantized q = allocate(parse_quant_scheme("q8_0"), 3, 64);
  EXPECT_THROW(
      quantize_rows(parse_quant_scheme("q8_0"), x.data(), 3, 40, q.codes.data(), q.scales.data()),
      Error);
  EXPECT_THROW(
      quantize_rows(parse_quant_scheme("mxfp4"), x.data(), 3, 40, q.codes.data(), q.scales.data()),
      Error);
  EXPECT_THROW(quantize_rows(QuantScheme{}, x.data(), 3, 40, q.codes.data(), q.scales.data()),
               Error);
}

}  // namespace
}  // namespace refit
