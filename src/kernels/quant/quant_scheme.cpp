#include "kernels/quant/quant_scheme.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/float_formats.h"

namespace refit {

DType QuantScheme::code_dtype() const {
  switch (method) {
    case QuantMethod::fp8_tensor:
    case QuantMethod::fp8_channel:
    case QuantMethod::fp8_block:
      return DType::f8_e4m3fn;
    case QuantMethod::mxfp4:
      return DType::f4_e2m1;
    case QuantMethod::q8_0:
      return DType::i8;
    case QuantMethod::none:
      break;
  }
  return DType::f32;
}

DType QuantScheme::scale_dtype() const {
  switch (method) {
    case QuantMethod::mxfp4:
      return DType::e8m0;
    case QuantMethod::q8_0:
      return DType::f16;
    default:
      return DType::f32;
  }
}

int64_t QuantScheme::group(int64_t k) const {
  switch (method) {
    case QuantMethod::fp8_block:
      return 128;
    case QuantMethod::mxfp4:
    case QuantMethod::q8_0:
      return 32;
    default:
      return std::max<int64_t>(k, 1);
  }
}

int64_t QuantScheme::scale_cols(int64_t k) const {
  const int64_t g = group(k);
  return (k + g - 1) / g;
}

std::string QuantScheme::unsupported_reason(int64_t k) const {
  if ((method == QuantMethod::mxfp4 || method == QuantMethod::q8_0) && k % 32 != 0)
    return fmt::format("{} needs K (input features on this rank) to be a multiple of 32, got {}",
                       name(), k);
  return {};
}

std::string QuantScheme::name() const {
  std::string base;
  switch (method) {
    case QuantMethod::none:
      return "none";
    case QuantMethod::fp8_tensor:
      base = "fp8-tensor";
      break;
    case QuantMethod::fp8_channel:
      base = "fp8-channel";
      break;
    case QuantMethod::fp8_block:
      base = "fp8-block";
      break;
    case QuantMethod::mxfp4:
      base = "mxfp4";
      break;
    case QuantMethod::q8_0:
      base = "q8_0";
      break;
  }
  if (!w8a8) return base;
  return static_activations ? base + "-w8a8-static" : base + "-w8a8";
}

QuantScheme parse_quant_scheme(std::string_view name) {
  QuantScheme s;
  std::string n(name);
  if (n.empty() || n == "none") return s;
  const std::string suffix = "-w8a8";
  if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
    s.w8a8 = true;
    n.resize(n.size() - suffix.size());
  }
  if (n == "fp8" || n == "fp8-tensor")
    s.method = QuantMethod::fp8_tensor;
  else if (n == "fp8-channel")
    s.method = QuantMethod::fp8_channel;
  else if (n == "fp8-block")
    s.method = QuantMethod::fp8_block;
  else if (n == "mxfp4")
    s.method = QuantMethod::mxfp4;
  else if (n == "q8_0" || n == "q8-0")
    s.method = QuantMethod::q8_0;
  else
    fail(
        "unknown quantization '{}' (use fp8, fp8-tensor, fp8-channel, fp8-block, mxfp4 or q8_0, "
        "each "
        "optionally with -w8a8)",
        name);
  return s;
}

int64_t code_row_bytes(const QuantScheme& scheme, int64_t k) {
  return scheme.method == QuantMethod::mxfp4 ? k / 2 : k;
}

// quantize_rows: kernels/quant/quantize.cpp (fast path) and quant_reference.cpp (the scalar spec).

void dequantize_rows(const QuantScheme& scheme, const void* codes_v, const void* scales_v,
                     int64_t n, int64_t k, float* out) {
  const int64_t g = scheme.group(k), s_cols = scheme.scale_cols(k);
  const auto* codes = static_cast<const uint8_t*>(codes_v);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const int64_t si = r * s_cols + c / g, i = r * k + c;
      float v = 0.0f;
      switch (scheme.method) {
        case QuantMethod::fp8_tensor:
        case QuantMethod::fp8_channel:
        case QuantMethod::fp8_block:
          v = f8_e4m3fn_to_f32(codes[i]) * static_cast<const float*>(scales_v)[si];
          break;
        case QuantMethod::mxfp4:
          v = f4_e2m1_to_f32(codes[i / 2] >> (4 * (i & 1))) *
              e8m0_to_f32(static_cast<const uint8_t*>(scales_v)[si]);
          break;
        case QuantMethod::q8_0:
          v = static_cast<float>(static_cast<int8_t>(codes[i])) *
              f16_to_f32(static_cast<const uint16_t*>(scales_v)[si]);
          break;
        case QuantMethod::none:
          fail("dequantize: no quantization scheme");
      }
      out[i] = v;
    }
}

int64_t scale_groups_per_tile(const QuantScheme& scheme) {
  // A shuffled code tile is 32 bytes wide: 32 Q8_0 values (one group) or 64 MXFP4 values.
  return scheme.method == QuantMethod::mxfp4 ? 2 : 1;
}

bool scales_follow_tiles(const QuantScheme& scheme) {
  return scheme.method == QuantMethod::mxfp4 || scheme.method == QuantMethod::q8_0;
}

void shuffle_scales_16(void* scales, int64_t n, int64_t s, int64_t g, size_t elem_size,
                       bool inverse) {
  REFIT_ASSERT(n % 16 == 0 && s % g == 0);
  auto* bytes = static_cast<uint8_t*>(scales);
  std::vector<uint8_t> copy(bytes, bytes + n * s * elem_size);
  for (int64_t t = 0; t < n / 16; ++t)
    for (int64_t c = 0; c < s / g; ++c)
      for (int64_t r = 0; r < 16; ++r)
        for (int64_t j = 0; j < g; ++j) {
          const int64_t plain = (t * 16 + r) * s + c * g + j;
          const int64_t tiled = ((t * (s / g) + c) * 16 + r) * g + j;
          const int64_t from = inverse ? tiled : plain, to = inverse ? plain : tiled;
          std::memcpy(bytes + to * elem_size, copy.data() + from * elem_size, elem_size);
        }
}

}  // namespace refit
