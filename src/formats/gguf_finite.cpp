#include "formats/gguf_finite.h"

#include <fmt/format.h>

#include <cstring>

namespace refit {

bool gguf_finite_scan_supported(GgmlType type) {
  return type == GgmlType::q8_0 || type == GgmlType::q4_0;
}

GgufFiniteScan scan_gguf_finite(const GgmlTensorView& t) {
  GgufFiniteScan out;
  const GgmlTypeTraits& traits = ggml_type_traits(t.type);
  const auto* bytes = static_cast<const uint8_t*>(t.bytes.raw_data());
  if (!gguf_finite_scan_supported(t.type)) return out;
  out.supported = true;
  // The f16 scale d is each block's first two bytes: an all-ones exponent is NaN or inf.
  const int64_t blocks = t.numel() / traits.block_size;
  const size_t stride = traits.type_size;
  for (int64_t b = 0; b < blocks; ++b) {
    uint16_t d;
    std::memcpy(&d, bytes + static_cast<size_t>(b) * stride, sizeof d);
    if ((d & 0x7C00u) != 0x7C00u) continue;
    out.problem = fmt::format("block {} (values {}..{}) has scale {}, so its values are not finite",
                              b, b * traits.block_size, (b + 1) * traits.block_size - 1,
                              d & 0x03FFu ? "nan" : (d & 0x8000u ? "-inf" : "inf"));
    break;
  }
  return out;
}

}  // namespace refit
