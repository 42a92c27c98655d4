#include "kernels/quant/quant_reference.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/float_formats.h"

namespace refit {

float fp8_group_scale(float amax) {
  const float s = amax / 448.0f;
  return s > 0.0f && std::isfinite(s) ? s : 1.0f;
}

namespace {

// std::max(amax, NaN) keeps amax: a NaN never becomes a group's amax.
float amax_of(const float* rows, int64_t k, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  float amax = 0.0f;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(rows[r * k + c]));
  return amax;
}

void quantize_fp8(const QuantScheme& scheme, const float* rows, int64_t n, int64_t k,
                  uint8_t* codes, float* scales) {
  const int64_t g = scheme.group(k), s_cols = scheme.scale_cols(k);
  // Row blocks: the whole sub-shard (per-tensor), 128 rows (blocks) or one row.
  const int64_t row_block =
      scheme.method == QuantMethod::fp8_tensor ? std::max<int64_t>(n, 1) : scheme.block_rows();
  for (int64_t r0 = 0; r0 < n; r0 += row_block) {
    const int64_t r1 = std::min(n, r0 + row_block);
    for (int64_t sc = 0; sc < s_cols; ++sc) {
      const int64_t c0 = sc * g, c1 = std::min(k, c0 + g);
      const float scale = fp8_group_scale(amax_of(rows, k, r0, r1, c0, c1));
      for (int64_t r = r0; r < r1; ++r) {
        scales[r * s_cols + sc] = scale;
        for (int64_t c = c0; c < c1; ++c)
          codes[r * k + c] = f32_to_f8_e4m3fn(rows[r * k + c] / scale);
      }
    }
  }
}

// OCP MX v1.0 section 6.3: shared exponent floor(log2(amax)) - emax(e2m1) = ... - 2, then
// each value / 2^E rounded to e2m1 (nearest-even, saturating at 6).
void quantize_mxfp4(const float* rows, int64_t n, int64_t k, uint8_t* codes, uint8_t* scales) {
  const int64_t s_cols = k / 32;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < s_cols; ++b) {
      const float* x = rows + r * k + b * 32;
      const float amax = amax_of(x, 32, 0, 1, 0, 32);
      int e = amax > 0.0f && std::isfinite(amax) ? std::ilogb(amax) - 2 : -127;
      e = std::clamp(e, -127, 127);
      scales[r * s_cols + b] = static_cast<uint8_t>(e + 127);
      uint8_t* out = codes + (r * k + b * 32) / 2;
      for (int j = 0; j < 32; j += 2) {
        const uint8_t lo = f32_to_f4_e2m1(std::ldexp(x[j], -e));
        const uint8_t hi = f32_to_f4_e2m1(std::ldexp(x[j + 1], -e));
        out[j / 2] = static_cast<uint8_t>((lo & 0xF) | (hi << 4));
      }
    }
}

// ggml's quantize_row_q8_0_ref, block by block along each row.
void quantize_q8_0(const float* rows, int64_t n, int64_t k, int8_t* codes, uint16_t* scales) {
  const int64_t s_cols = k / 32;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < s_cols; ++b) {
      const float* x = rows + r * k + b * 32;
      const float amax = amax_of(x, 32, 0, 1, 0, 32);
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      scales[r * s_cols + b] = f32_to_f16(d);
      for (int j = 0; j < 32; ++j)
        codes[r * k + b * 32 + j] = static_cast<int8_t>(std::roundf(x[j] * id));
    }
}

}  // namespace

void quantize_rows_reference(const QuantScheme& scheme, const float* rows, int64_t n, int64_t k,
                             void* codes, void* scales) {
  std::string why = scheme.unsupported_reason(k);
  if (!why.empty()) fail("quantize: {}", why);
  switch (scheme.method) {
    case QuantMethod::fp8_tensor:
    case QuantMethod::fp8_channel:
    case QuantMethod::fp8_block:
      return quantize_fp8(scheme, rows, n, k, static_cast<uint8_t*>(codes),
                          static_cast<float*>(scales));
    case QuantMethod::mxfp4:
      return quantize_mxfp4(rows, n, k, static_cast<uint8_t*>(codes),
                            static_cast<uint8_t*>(scales));
    case QuantMethod::q8_0:
      return quantize_q8_0(rows, n, k, static_cast<int8_t*>(codes), static_cast<uint16_t*>(scales));
    case QuantMethod::none:
      break;
  }
  fail("quantize: no quantization scheme");
}

}  // namespace refit
