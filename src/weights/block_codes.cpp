#include "weights/block_codes.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/float_formats.h"

namespace refit {

std::string block_codes_non_finite(const BlockCodes& codes) {
  const int64_t rows = codes.shape[0], groups = codes.shape[1] / 32;
  const bool q8 = codes.method == QuantMethod::q8_0;
  std::vector<uint8_t> scales(static_cast<size_t>(groups) * (q8 ? 2 : 1));
  for (int64_t r = 0; r < rows; ++r) {
    codes.read(r, 0, groups, nullptr, scales.data());
    for (int64_t g = 0; g < groups; ++g) {
      float v;
      if (q8) {
        uint16_t h;
        std::memcpy(&h, scales.data() + 2 * g, 2);
        v = f16_to_f32(h);
      } else {
        v = scales[static_cast<size_t>(g)] == 0xFF ? NAN : 0.0f;
      }
      if (!std::isfinite(v))
        return fmt::format(
            "row {}'s block {} (values {}..{}) has scale {}, so its values are not "
            "finite",
            r, g, g * 32, g * 32 + 31, q8 ? fmt::format("{}", v) : "e8m0 0xFF (NaN)");
    }
  }
  return "";
}

BlockCodes mxfp4_part_codes(const AliasPart& part, const Tensor& blocks, const Tensor& scales) {
  if (part.transpose) return {};
  const Tensor b = alias_part_view(part, blocks);  // [rows, G, 16], rows strided when interleaved
  const Tensor s = alias_part_view(part, scales);  // [rows, G]
  // Each row's blocks and scales must be one run of bytes (a stacked tensor as stored is).
  if (b.stride(2) != 1 || b.stride(1) != 16 || s.stride(1) != 1) return {};
  BlockCodes codes;
  codes.method = QuantMethod::mxfp4;
  codes.shape = {b.size(0), b.size(1) * 32};
  // transformers' packing (value 2i low, 2i + 1 high) is the one the parameter stores.
  codes.read = [b, s](int64_t row, int64_t g0, int64_t groups, uint8_t* out_codes,
                      uint8_t* out_scales) {
    if (out_codes)
      std::memcpy(out_codes, b.data<const uint8_t>() + row * b.stride(0) + g0 * 16,
                  static_cast<size_t>(groups) * 16);
    std::memcpy(out_scales, s.data<const uint8_t>() + row * s.stride(0) + g0,
                static_cast<size_t>(groups));
  };
  return codes;
}

}  // namespace refit
