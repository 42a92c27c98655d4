#include "weights/layout_transform.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/interleave_4x16.h"

namespace refit {

const char* layout_transform_name(LayoutTransform t) {
  switch (t) {
    case LayoutTransform::transpose:
      return "transpose";
    case LayoutTransform::shuffle_16x16:
      return "shuffle_16x16";
    case LayoutTransform::interleave_4x16:
      return "interleave_4x16";
  }
  return "?";
}

std::string shuffle_16x16_unsupported_reason(int64_t rows, int64_t cols, DType dtype) {
  const int bits = dtype_bits(dtype);
  if (bits < 8 || 128 % bits != 0)
    return fmt::format("{} elements do not tile into 16 bytes", dtype_name(dtype));
  const int64_t kp = 128 / bits;  // elements per 16 bytes
  if (rows % 16 != 0) return fmt::format("N = {} is not a multiple of 16", rows);
  if (cols % 32 != 0) return fmt::format("K = {} is not a multiple of 32", cols);
  if (32 % kp != 0) return fmt::format("BK = 32 is not a multiple of KP = {}", kp);
  return {};
}

namespace {
// [N/16, 16, K/32, 32/KP, KP] permuted (0, 2, 3, 1, 4) as a view over `w`.
Tensor tiled_view(const Tensor& w, bool forward) {
  const int64_t n = w.size(0), k = w.size(1);
  const int64_t kp = 128 / dtype_bits(w.dtype());
  if (forward) return w.view({n / 16, 16, k / 32, 32 / kp, kp}).permute({0, 2, 3, 1, 4});
  // Inverse: the shuffled buffer viewed in its permuted order, permuted back.
  return w.view({n / 16, k / 32, 32 / kp, 16, kp}).permute({0, 3, 1, 2, 4});
}
}  // namespace

Tensor shuffle_16x16(const Tensor& w) {
  if (w.dim() != 2) fail("shuffle_16x16: expected a 2-d weight, got {}", w.str());
  if (w.layout() != Layout::strided)
    fail("shuffle_16x16: the weight is already in layout {}; shuffling twice would scramble it",
         layout_name(w.layout()));
  std::string why = shuffle_16x16_unsupported_reason(w.size(0), w.size(1), w.dtype());
  if (!why.empty()) fail("shuffle_16x16: cannot shuffle {}: {}", w.str(), why);
  Tensor out = tiled_view(w.contiguous(), true).contiguous().view(w.shape());
  out.set_layout(Layout::shuffled_16x16);
  return out;
}

Tensor unshuffle_16x16(const Tensor& w) {
  if (w.layout() != Layout::shuffled_16x16) fail("unshuffle_16x16: {} is not shuffled", w.str());
  Tensor plain = w.contiguous();
  plain.set_layout(Layout::strided);
  Tensor out = tiled_view(plain, false).contiguous().view(w.shape());
  return out;
}

namespace {
Tensor permuted_rows(const Tensor& w, bool forward) {
  const char* what = forward ? "interleave_4x16" : "deinterleave_4x16";
  if (w.dim() != 2 || dtype_bits(w.dtype()) != 8)
    fail("{}: expected a 2-d tensor of 1-byte codes, got {}", what, w.str());
  if (w.layout() != (forward ? Layout::strided : Layout::interleaved_4x16))
    fail("{}: {} is in layout {}", what, w.str(), layout_name(w.layout()));
  Tensor in = w.contiguous();
  Tensor out = Tensor::empty(w.shape(), w.dtype());
  const auto* src = static_cast<const uint8_t*>(in.raw_data());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  if (forward)
    interleave_4x16_rows(src, dst, w.size(0), w.size(1));
  else
    deinterleave_4x16_rows(src, dst, w.size(0), w.size(1));
  out.set_layout(forward ? Layout::interleaved_4x16 : Layout::strided);
  return out;
}
}  // namespace

Tensor interleave_4x16(const Tensor& w) { return permuted_rows(w, true); }
Tensor deinterleave_4x16(const Tensor& w) { return permuted_rows(w, false); }

}  // namespace refit
