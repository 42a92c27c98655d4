// The finiteness check of a weight update (weights/finite_scan.h) on a GGUF tensor that
// must be converted before it is loaded, read from the file's own bytes so it need not be
// dequantized twice (once to check, once at commit). Q8_0 and Q4_0 values are a small
// integer times the block's f16 scale d, so they are all finite exactly when every d is.
#pragma once

#include <optional>
#include <string>

#include "formats/gguf.h"

namespace refit {

struct GgufFiniteScan {
  bool supported = false;  // false: this type's values are checked after dequantizing
  std::string problem;     // empty: all finite; else which block (values) and its scale
};

// Q8_0 and Q4_0 by their scales; other types are not supported (plain ones are scanned as
// tensors: weights/finite_scan.h).
GgufFiniteScan scan_gguf_finite(const GgmlTensorView& tensor);
bool gguf_finite_scan_supported(GgmlType type);

}  // namespace refit
