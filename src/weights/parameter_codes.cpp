// Parameter::load_codes and load_block_codes: FP8 codes and scales, and Q8_0 / MXFP4 blocks,
// that a checkpoint already holds, stored as they are.
// The same bytes a fresh load from that checkpoint writes, whatever the engine held before,
// so a reload (RL sync from disk) is exact; and the parameter's scheme is the checkpoint's
// granularity, so a refit from floats quantizes as the checkpoint's writer did.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/quant/quantize.h"
#include "weights/block_codes.h"
#include "weights/finite_scan.h"
#include "weights/parameter.h"

namespace refit {
namespace {

bool is_fp8(QuantMethod m) {
  return m == QuantMethod::fp8_tensor || m == QuantMethod::fp8_channel ||
         m == QuantMethod::fp8_block;
}

}  // namespace

void Parameter::check_codes_loadable(const SubShard& sub, const Tensor& codes, const Tensor& scales,
                                     QuantMethod stored, bool check_finite) const {
  const std::string& what = sub.checkpoint_name;
  if (!is_fp8(quant_.method))
    fail("'{}': FP8 codes need an FP8 parameter; '{}' is stored {}", what, name_, quant_.name());
  QuantScheme file;
  file.method = stored;
  if (stored != quant_.method)
    fail(
        "'{}': the checkpoint's codes are {} but '{}' is {}; they load by value (decoded and "
        "re-quantized), not as stored",
        what, file.name(), name_, quant_.name());
  if (!codes.defined() || codes.dtype() != DType::f8_e4m3fn)
    fail("'{}': FP8 codes must be f8_e4m3fn, got {}", what,
         codes.defined() ? dtype_name(codes.dtype()) : "nothing");
  if (codes.shape() != sub.checkpoint_shape || codes.dim() != 2)
    fail("'{}': expected codes of shape {}, got {}", what, shape_str(sub.checkpoint_shape),
         shape_str(codes.shape()));
  const Shape want_scales = {codes.size(0), quant_.scale_cols(codes.size(1))};
  if (!scales.defined() || scales.dtype() != DType::f32 || scales.shape() != want_scales ||
      !scales.is_contiguous())
    fail("'{}': expected contiguous f32 scales {}, got {}", what, shape_str(want_scales),
         scales.defined() ? scales.str() : "nothing");
  if (codes.device().type != DeviceType::cpu || scales.device().type != DeviceType::cpu)
    fail("'{}': codes and scales must be on the cpu, where this engine's weights live", what);
  // A block of 128 columns split between ranks would leave this rank without its scale.
  if (stored == QuantMethod::fp8_block && sub.split_dim == 1 && sub.slice_start % 128 != 0)
    fail("'{}': this rank's columns start at {}, inside a 128-column scale block", what,
         sub.slice_start);
  if ((data_.layout() != Layout::strided && data_.layout() != Layout::shuffled_16x16) ||
      scale_.layout() != Layout::strided)
    fail("parameter '{}': FP8 codes in layout {} cannot be loaded as stored", name_,
         layout_name(data_.layout()));
  const float* s = scales.data<const float>();
  for (int64_t i = 0; i < scales.numel(); ++i)
    if (!std::isfinite(s[i])) fail("'{}': scale {} is {} (finite scales required)", what, i, s[i]);
  if (check_finite) require_finite(sub, codes);  // e4m3fn's NaN codes, S.1111.111
}

void Parameter::load_codes(const SubShard& sub, const Tensor& codes, const Tensor& scales,
                           QuantMethod stored) {
  check_codes_loadable(sub, codes, scales, stored);
  loaded_ = true;
  const int64_t k = local_shape_[1], s = scale_.size(1), rows = sub.local_rows;
  // This rank's rows of codes and of their per-row scales, in local row order.
  Tensor local = sub.slice(codes).contiguous();
  REFIT_ASSERT(local.numel() == rows * k);
  std::vector<float> local_scales(static_cast<size_t>(rows * s));
  const float* all = scales.data<const float>();
  const int64_t all_cols = scales.size(1);
  const int64_t col0 = sub.split_dim == 1 ? sub.slice_start / 128 : 0;  // blocks only (S > 1)
  int64_t row = 0;
  const std::vector<SliceRange> ranges =
      sub.split_dim == 0 ? sub.slices() : std::vector<SliceRange>{{0, codes.size(0)}};
  for (const SliceRange& r : ranges)
    for (int64_t i = 0; i < r.length; ++i, ++row)
      for (int64_t c = 0; c < s; ++c)
        local_scales[row * s + c] = all[(r.start + i) * all_cols + (s == 1 ? 0 : col0 + c)];
  REFIT_ASSERT(row == rows);
  // A sub-shard's rows are one byte range of codes and of scales in the plain and the
  // shuffled layout (sub-shards start on a 16-row tile); FP8 scales never follow tiles.
  auto* code_base = static_cast<uint8_t*>(data_.storage()->data()) + sub.local_row_offset * k;
  std::memcpy(code_base, local.raw_data(), static_cast<size_t>(rows * k));
  if (data_.layout() == Layout::shuffled_16x16) {
    const Tensor shuffled = shuffle_16x16(code_bytes(sub.local_row_offset, rows));
    std::memcpy(code_base, shuffled.raw_data(), static_cast<size_t>(rows * k));
  }
  std::memcpy(static_cast<float*>(scale_.storage()->data()) + sub.local_row_offset * s,
              local_scales.data(), local_scales.size() * sizeof(float));
}

std::string Parameter::block_codes_unsupported_reason(const SubShard& sub,
                                                      const BlockCodes& codes) const {
  if (!codes) return "the checkpoint's blocks cannot be read as rows of codes";
  if (quant_.method != codes.method) {
    QuantScheme file;
    file.method = codes.method;
    return fmt::format("the checkpoint stores {} and '{}' is {}", file.name(), name_,
                       quant_.enabled() ? quant_.name() : "not quantized");
  }
  if (codes.shape.size() != 2 || codes.shape != sub.checkpoint_shape)
    return fmt::format("codes of shape {} for a tensor of shape {}", shape_str(codes.shape),
                       shape_str(sub.checkpoint_shape));
  const int64_t k = local_shape_[1];
  if (k % 32 != 0) return fmt::format("{} columns are not whole blocks of 32", k);
  if (sub.split_dim == 1 && (sub.slice_start % 32 != 0 || sub.slice_length % 32 != 0))
    return fmt::format("this rank's columns {}..{} are not whole blocks of 32", sub.slice_start,
                       sub.slice_start + sub.slice_length);
  const int64_t cols = sub.split_dim == 1 ? sub.slice_length : codes.shape[1];
  if (cols != k) return fmt::format("{} columns for a parameter of {}", cols, k);
  return "";
}

void Parameter::load_block_codes(const SubShard& sub, const BlockCodes& codes) {
  if (const std::string why = block_codes_unsupported_reason(sub, codes); !why.empty())
    fail("'{}': cannot store its codes in '{}' as they are: {}", sub.checkpoint_name, name_, why);
  loaded_ = true;
  const int64_t k = local_shape_[1], rows = sub.local_rows;
  // This rank's rows in local order: the ranges of a row split, else every row.
  std::vector<int64_t> source_row;
  source_row.reserve(static_cast<size_t>(rows));
  if (sub.split_dim == 0) {
    for (const SliceRange& r : sub.slices())
      for (int64_t i = 0; i < r.length; ++i) source_row.push_back(r.start + i);
  } else {
    for (int64_t i = 0; i < codes.shape[0]; ++i) source_row.push_back(i);
  }
  REFIT_ASSERT(static_cast<int64_t>(source_row.size()) == rows);
  const int64_t g0 = sub.split_dim == 1 ? sub.slice_start / 32 : 0, groups = k / 32;
  const int64_t row_bytes = code_row_bytes(quant_, k), s = scale_.size(1);
  const size_t scale_size = dtype_nbytes(scale_.dtype(), 1);
  // The rows go where load_quantized's quantizer puts them, in the same layout.
  auto* code_base = static_cast<uint8_t*>(data_.storage()->data());
  auto* scale_base = static_cast<uint8_t*>(scale_.storage()->data());
  store_code_rows(
      quant_, rows, k,
      [&](int64_t r, uint8_t* row_codes, uint8_t* row_scales) {
        codes.read(source_row[static_cast<size_t>(r)], g0, groups, row_codes, row_scales);
      },
      code_base + sub.local_row_offset * row_bytes,
      scale_base + static_cast<size_t>(sub.local_row_offset * s) * scale_size, data_.layout());
}

}  // namespace refit
