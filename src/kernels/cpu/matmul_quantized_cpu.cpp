// CPU kernels for matmul with quantized weights: one kernel per code type (f8 e4m3fn,
// packed f4 e2m1, i8) and weight layout (plain, shuffled_16x16), each registered for
// exactly the dtypes and layouts it reads (law L3).
//
// Each works on tiles of up to 16 output rows: gather the tile's code bytes (a shuffled
// tile is 16 rows x 32 bytes, stored [2][16][16]), decode them with their scales into
// f32 rows, then dot every activation row with them. W8A8 inputs (f8 codes with a
// per-token scale) are decoded to f32 once per call. Sums run over k in order in eight
// lanes; the result agrees with dequantize-then-matmul to ~1e-6 relative.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/float_formats.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul_quantized_rows.h"
#include "kernels/matmul_quantized.h"
#include "kernels/op_names.h"
#include "kernels/quant/quant_reference.h"
#include "kernels/quant/quant_rows_simd.h"

namespace refit::cpu {
namespace {

enum class Code : uint8_t { f8, f4, i8 };

struct Tables {
  std::array<float, 256> f8{};
  std::array<float, 16> f4{};
  std::array<float, 256> e8m0{};
  Tables() {
    for (int i = 0; i < 256; ++i) {
      f8[i] = f8_e4m3fn_to_f32(static_cast<uint8_t>(i));
      e8m0[i] = e8m0_to_f32(static_cast<uint8_t>(i));
    }
    for (int i = 0; i < 16; ++i) f4[i] = f4_e2m1_to_f32(static_cast<uint8_t>(i));
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}

float scale_value(const Tensor& s, int64_t index) {
  switch (s.dtype()) {
    case DType::f32:
      return s.data<const float>()[index];
    case DType::f16:
      return f16_to_f32(s.data<const uint16_t>()[index]);
    case DType::e8m0:
      return tables().e8m0[s.data<const uint8_t>()[index]];
    default:
      fail("matmul_quantized: scale dtype {} is not supported", dtype_name(s.dtype()));
  }
}

inline float dot(const float* a, const float* b, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float tail = 0.0f;
  for (; i < k; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

template <Code C>
constexpr int64_t values_per_byte() {
  return C == Code::f4 ? 2 : 1;
}

// Decodes one row of codes (plain byte order) with its scales into `out` [K].
template <Code C>
void decode_row(const uint8_t* codes, const float* scales, int64_t k_total, int64_t group,
                float* out) {
  const Tables& t = tables();
  for (int64_t k0 = 0, g = 0; k0 < k_total; k0 += group, ++g) {
    const int64_t k1 = std::min(k_total, k0 + group);
    const float s = scales[g];
    for (int64_t k = k0; k < k1; ++k) {
      float v;
      if constexpr (C == Code::f8)
        v = t.f8[codes[k]];
      else if constexpr (C == Code::i8)
        v = static_cast<float>(static_cast<int8_t>(codes[k]));
      else
        v = t.f4[(codes[k / 2] >> (4 * (k & 1))) & 0xF];
      out[k] = v * s;
    }
  }
}

template <Code C, bool Shuffled>
void matmul_quantized_cpu(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                          const Tensor& w_scale, int64_t group, const Tensor& bias, Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0), S = w_scale.size(1);
  const int64_t row_bytes = K / values_per_byte<C>();
  const uint8_t* codes = static_cast<const uint8_t*>(w.raw_data());
  // Activations as f32 rows.
  std::vector<float> x_decoded;
  const float* xs = x.data<const float>();
  int64_t ldx = x.stride(0);
  if (x.dtype() == DType::f8_e4m3fn) {
    x_decoded.resize(static_cast<size_t>(M * K));
    const uint8_t* xq = static_cast<const uint8_t*>(x.raw_data());
    for (int64_t m = 0; m < M; ++m) {
      const float s = x_scale.data<const float>()[m];
      for (int64_t k = 0; k < K; ++k)
        x_decoded[m * K + k] = tables().f8[xq[m * x.stride(0) + k]] * s;
    }
    xs = x_decoded.data();
    ldx = K;
  }
  // Scales of a shuffled f4/i8 weight are stored tile by tile: g groups per 32-byte tile.
  const bool tiled_scales = w_scale.layout() == Layout::shuffled_16x16;
  const int64_t g = tiled_scales ? 32 * values_per_byte<C>() / group : 1;
  const float* b = bias.defined() ? bias.data<const float>() : nullptr;
  float* o = out.data<float>();
  const int64_t ldo = out.stride(0);
  parallel_for((N + 15) / 16, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> rows(static_cast<size_t>(16 * K));
    std::vector<float> scales(static_cast<size_t>(S));
    std::vector<uint8_t> row_codes(static_cast<size_t>(row_bytes));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * 16, nr = std::min<int64_t>(16, N - n0);
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t n = n0 + r;
        const uint8_t* row = codes + n * row_bytes;
        if constexpr (Shuffled) {
          for (int64_t kt = 0; kt < row_bytes / 32; ++kt)
            for (int64_t h = 0; h < 2; ++h)
              std::memcpy(row_codes.data() + kt * 32 + h * 16,
                          codes + (t * (row_bytes / 32) + kt) * 512 + h * 256 + r * 16, 16);
          row = row_codes.data();
        }
        for (int64_t c = 0; c < S; ++c)
          scales[c] = scale_value(
              w_scale, tiled_scales ? ((t * (S / g) + c / g) * 16 + r) * g + c % g : n * S + c);
        decode_row<C>(row, scales.data(), K, group, rows.data() + r * K);
      }
      for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < nr; ++r) {
          float v = dot(xs + m * ldx, rows.data() + r * K, K);
          if (b) v += b[n0 + r];
          o[m * ldo + n0 + r] = v;
        }
    }
  });
}

void quantize_per_token_fp8_cpu(const Tensor& x, Tensor& xq, Tensor& x_scale) {
  const int64_t M = x.size(0), K = x.size(1);
  uint8_t* q = static_cast<uint8_t*>(xq.raw_data());
  float* s = x_scale.data<float>();
  // A token is an fp8-channel weight row: the same scale rule (amax / 448, or 1 for a zero
  // or non-finite amax) and nearest-even saturating codes, by the SIMD row quantizers the
  // weights use (bit for bit the scalar f32_to_f8_e4m3fn(x / scale); several times faster,
  // which matters here: this runs before every W8A8 matmul).
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x.data<const float>() + m * x.stride(0);
    float amax = 0.0f;
    quant_simd::group_amax(row, K, K, &amax);
    s[m] = fp8_group_scale(amax);
    quant_simd::fp8_row(row, K, K, &s[m], q + m * K);
  }
}

}  // namespace

void register_quantized_matmul_kernels(KernelRegistry& registry) {
  QuantizedKernelFamily scalar;
  scalar.name_prefix = "matmul_quantized.cpu.";
  scalar.priority = 10;
  scalar.covered_by_simd = true;  // matmul_quantized_hwy.cpp takes these inputs (bar f4 tails)
  scalar.f8_plain = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_cpu<Code::f8, false>);
  scalar.f8_shuffled = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_cpu<Code::f8, true>);
  scalar.f4_plain = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_cpu<Code::f4, false>);
  scalar.f4_shuffled = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_cpu<Code::f4, true>);
  scalar.i8_plain = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_cpu<Code::i8, false>);
  scalar.i8_shuffled = kernel_fn<kernels::MatmulQuantizedFn>(&matmul_quantized_cpu<Code::i8, true>);
  register_quantized_family(registry, scalar);
  Kernel q;
  q.op = op_names::quantize_per_token_fp8;
  q.name = "quantize_per_token_fp8.cpu";
  q.device = DeviceType::cpu;
  q.priority = 10;
  q.args = {{"x", {DType::f32}, {Layout::strided}},
            {"xq", {DType::f8_e4m3fn}, {Layout::strided}},
            {"x_scale", {DType::f32}, {Layout::strided}}};
  q.constraint = [](std::span<const Tensor* const> a) -> std::string {
    if (a[0]->stride(-1) != 1) return "x needs stride 1 along K";
    if (!a[1]->is_contiguous() || !a[2]->is_contiguous())
      return "xq and x_scale must be contiguous";
    return {};
  };
  q.constraint_text = "x rows dense; xq, x_scale contiguous";
  q.fn = kernel_fn<kernels::QuantizePerTokenFn>(&quantize_per_token_fp8_cpu);
  registry.add(std::move(q));
}

}  // namespace refit::cpu
