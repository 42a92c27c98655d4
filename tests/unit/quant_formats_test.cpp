// Quantization math: llama.cpp's test-quantize-fns error bounds on its synthetic data,
// exhaustive round-to-nearest-even checks of the 8- and 4-bit codes against a brute-force
// scalar reference, and Q8_0 byte-for-byte against llama-quantize's output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/float_formats.h"
#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "kernels/quant/quant_scheme.h"

namespace refit {
namespace {

// tests/test-quantize-fns.cpp: generate_data and array_rmse (sqrt(sum d^2) / n, sic).
std::vector<float> generate_data(float offset, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.1f + 2.0f * std::cos(static_cast<float>(i) + offset);
  return v;
}

float array_rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += double(a[i] - b[i]) * double(a[i] - b[i]);
  return static_cast<float>(std::sqrt(sum) / static_cast<double>(a.size()));
}

struct Round {
  std::vector<uint8_t> codes, scales;
  std::vector<float> values;
};

Round round_trip(const QuantScheme& s, const std::vector<float>& x, int64_t n, int64_t k) {
  Round r;
  r.codes.resize(static_cast<size_t>(n * code_row_bytes(s, k)));
  r.scales.resize(static_cast<size_t>(n * s.scale_cols(k)) * dtype_nbytes(s.scale_dtype(), 1));
  r.values.resize(x.size());
  quantize_rows(s, x.data(), n, k, r.codes.data(), r.scales.data());
  dequantize_rows(s, r.codes.data(), r.scales.data(), n, k, r.values.data());
  return r;
}

TEST(QuantErrorBounds, test_quantize_fns_thresholds_on_its_synthetic_data) {
  constexpr size_t kSize = 32 * 128;  // test-quantize-fns' test_size
  const struct {
    const char* scheme;
    float max_error;  // MAX_QUANTIZATION_TOTAL_ERROR (0.002) / _FP4 (0.003)
  } cases[] = {{"fp8-tensor", 0.002f},
               {"fp8-channel", 0.002f},
               {"fp8-block", 0.002f},
               {"q8_0", 0.002f},
               {"mxfp4", 0.003f}};
  for (const auto& c : cases)
    for (float offset : {0.0f, 1.0f}) {
      const QuantScheme s = parse_quant_scheme(c.scheme);
      const std::vector<float> x = generate_data(offset, kSize);
      // One row of 4096 (as test-quantize-fns), and 32 rows of 128 (so fp8-block's
      // 128 x 128 block and fp8-tensor's per-sub-shard scale span rows too).
      for (int64_t rows : {int64_t{1}, int64_t{32}}) {
        const float err =
            array_rmse(x, round_trip(s, x, rows, static_cast<int64_t>(kSize) / rows).values);
        EXPECT_LT(err, c.max_error) << c.scheme << " offset " << offset << " rows " << rows;
        RecordProperty(std::string(c.scheme) + "_rmse", std::to_string(err));
      }
    }
}

// Brute force: the finite code nearest to v; on a tie the one with an even code (the
// last mantissa bit 0). Saturates (the formats have no infinity).
template <typename Decode>
uint32_t nearest_even_reference(float v, int bits, Decode decode) {
  uint32_t best = 0;
  double best_err = INFINITY;
  for (uint32_t c = 0; c < (1u << bits); ++c) {
    const float d = decode(c);
    if (std::isnan(d)) continue;
    const double err = std::fabs(double(d) - double(v));
    const bool better = err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1);
    // Zero: keep the sign of v (both +0 and -0 are exact; the conversions keep the sign).
    if (better || (err == best_err && d == 0.0f && std::signbit(d) == std::signbit(v))) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

// Every gap between adjacent codes: the codes, the midpoints, one f32 ulp either side of
// each midpoint, and past the largest value.
template <typename Decode>
std::vector<float> probe_values(int bits, Decode decode) {
  std::vector<float> mags;
  const uint32_t positive = 1u << (bits - 1);
  for (uint32_t c = 0; c + 1 < positive; ++c) {
    const float a = decode(c), b = decode(c + 1);
    if (std::isnan(a) || std::isnan(b)) continue;
    const float mid = (a + b) / 2;
    for (float v : {a, b, mid, std::nextafter(mid, a), std::nextafter(mid, b)}) mags.push_back(v);
  }
  std::vector<float> out;
  for (float m : mags) {
    out.push_back(m);
    out.push_back(-m);
  }
  return out;
}

TEST(QuantRounding, fp8_codes_are_nearest_even_exhaustively) {
  auto decode = [](uint32_t c) { return f8_e4m3fn_to_f32(static_cast<uint8_t>(c)); };
  const std::vector<float> probes = probe_values(8, decode);  // all within +-448
  // Scale 1 (amax 448) and scale 2 (amax 896, every probe doubled): exact scalings.
  for (float scale : {1.0f, 2.0f}) {
    std::vector<float> row = {448.0f * scale};
    for (float p : probes) row.push_back(p * scale);
    QuantScheme s = parse_quant_scheme("fp8-channel");
    Round r = round_trip(s, row, 1, static_cast<int64_t>(row.size()));
    float stored;
    std::memcpy(&stored, r.scales.data(), 4);
    ASSERT_EQ(stored, scale);
    for (size_t i = 0; i < row.size(); ++i)
      ASSERT_EQ(r.codes[i], nearest_even_reference(row[i] / scale, 8, decode))
          << "value " << row[i] / scale;
  }
  // Saturation through the converter the quantizer uses (satfinite: 0x7E = 448).
  EXPECT_EQ(f32_to_f8_e4m3fn(460.0f), 0x7E);
  EXPECT_EQ(f32_to_f8_e4m3fn(-1e9f), 0xFE);
}

TEST(QuantRounding, mxfp4_codes_and_shared_exponent_exhaustively) {
  auto decode = [](uint32_t c) { return f4_e2m1_to_f32(static_cast<uint8_t>(c)); };
  std::vector<float> probes = probe_values(4, decode);
  probes.push_back(7.5f);  // above 6 but below the next power of two: saturates to 6
  probes.push_back(-7.9f);
  // Blocks of 32 led by 6.0 (exponent 0, X = 1) or 6 * 2^j (exponent j).
  for (int j : {-3, 0, 5}) {
    std::vector<float> row;
    for (size_t i = 0; i < probes.size(); i += 31) {
      row.push_back(std::ldexp(6.0f, j));
      for (size_t t = i; t < i + 31; ++t)
        row.push_back(t < probes.size() ? std::ldexp(probes[t], j) : 0.0f);
    }
    const int64_t k = static_cast<int64_t>(row.size());
    Round r = round_trip(parse_quant_scheme("mxfp4"), row, 1, k);
    for (int64_t b = 0; b < k / 32; ++b) ASSERT_EQ(r.scales[b], 127 + j);
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t code = (r.codes[i / 2] >> (4 * (i & 1))) & 0xF;
      ASSERT_EQ(code, nearest_even_reference(std::ldexp(row[i], -j), 4, decode))
          << "value " << row[i];
    }
  }
  // The shared exponent is floor(log2(amax)) - 2 for every binade, exactly at its edges.
  for (int e = -100; e <= 100; ++e)
    for (float m : {1.0f, std::nextafter(2.0f, 1.0f), 1.5f}) {
      std::vector<float> row(32, 0.0f);
      row[7] = -std::ldexp(m, e);
      Round r = round_trip(parse_quant_scheme("mxfp4"), row, 1, 32);
      ASSERT_EQ(r.scales[0], std::clamp(e - 2, -127, 127) + 127) << "amax 2^" << e << " * " << m;
    }
}

// llama-quantize made micro-llama-q8_0 from micro-llama-f32 (oracle README): refit's Q8_0
// quantizer reproduces every block byte for byte.
TEST(QuantGgufParity, q8_0_equals_llama_quantize_byte_for_byte) {
  const std::string dir = std::string(REFIT_SHARED_DIR) + "/oracle/llamacpp/";
  auto f32 = Checkpoint::open(dir + "llama-f32/micro-llama-f32-s1.gguf");
  auto q8 = Checkpoint::open(dir + "llama-q8_0/micro-llama-q8_0-s1.gguf");
  int checked = 0;
  for (const GgufTensorInfo& info : q8->gguf()->tensors()) {
    if (info.type != GgmlType::q8_0) continue;
    Tensor x = f32->gguf()->tensor(info.name);  // [rows, K] row-major
    const int64_t k = x.size(-1), n = x.numel() / k;
    QuantScheme s = parse_quant_scheme("q8_0");
    Round r = round_trip(s, x.contiguous().to_floats(), n, k);
    const GgmlTensorView raw = q8->gguf()->raw(info.name);
    const auto* blocks = static_cast<const BlockQ8_0*>(raw.bytes.raw_data());
    for (int64_t b = 0; b < n * k / 32; ++b) {
      uint16_t d;
      std::memcpy(&d, r.scales.data() + 2 * b, 2);
      ASSERT_EQ(d, blocks[b].d) << info.name << " block " << b;
      ASSERT_EQ(std::memcmp(r.codes.data() + 32 * b, blocks[b].qs, 32), 0)
          << info.name << " block " << b;
    }
    ++checked;
  }
  EXPECT_GE(checked, 28);
}

// MXFP4: llama-quantize picks the nearest value with ties to the smaller magnitude and
// writes +0 for -0; refit rounds ties to even (OCP) and keeps -0. Decoded values agree
// except at exact ties.
TEST(QuantGgufParity, mxfp4_values_match_llama_quantize_except_ties) {
  const std::string dir = std::string(REFIT_SHARED_DIR) + "/oracle/llamacpp/";
  auto f32 = Checkpoint::open(dir + "llama-f32/micro-llama-f32-s1.gguf");
  auto mx = Checkpoint::open(dir + "llama-mxfp4/micro-llama-mxfp4-s1.gguf");
  int64_t total = 0, differ = 0, ties = 0;
  for (const GgufTensorInfo& info : mx->gguf()->tensors()) {
    if (info.type != GgmlType::mxfp4) continue;
    Tensor x = f32->gguf()->tensor(info.name);
    const int64_t k = x.size(-1), n = x.numel() / k;
    const std::vector<float> xs = x.contiguous().to_floats();
    Round r = round_trip(parse_quant_scheme("mxfp4"), xs, n, k);
    const std::vector<float> theirs = mx->gguf()->dequantize(info.name).contiguous().to_floats();
    for (size_t i = 0; i < xs.size(); ++i) {
      ++total;
      if (r.values[i] == theirs[i]) continue;
      ++differ;
      // A tie: x is exactly between the two candidates.
      if (std::fabs(double(xs[i]) - r.values[i]) == std::fabs(double(xs[i]) - theirs[i])) ++ties;
    }
  }
  EXPECT_GT(total, 1000000);
  EXPECT_EQ(differ, ties) << differ << " of " << total << " values differ, " << ties
                          << " of them at ties";
}

}  // namespace
}  // namespace refit
