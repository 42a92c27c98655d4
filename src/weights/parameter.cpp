#include "weights/parameter.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/quant/quantize.h"
#include "weights/finite_scan.h"

namespace refit {

Parameter::Parameter(std::string name, Shape local_shape, DType stored_dtype,
                     std::vector<SubShard> sub_shards, int64_t rank, int64_t world)
    : name_(std::move(name)),
      local_shape_(std::move(local_shape)),
      sub_shards_(std::move(sub_shards)),
      rank_(rank),
      world_(world) {
  REFIT_ASSERT(!sub_shards_.empty());
  logical_shape_ = sub_shards_[0].checkpoint_shape;
  if (sub_shards_.size() > 1) {
    logical_shape_[0] = 0;
    for (const SubShard& s : sub_shards_) logical_shape_[0] += s.checkpoint_shape[0];
  }
  int64_t rows = 0;
  for (const SubShard& s : sub_shards_) {
    rows += s.local_rows;
    if (!s.more_slices.empty()) check_ranges(s);
  }
  // Rows past the last sub-shard are padding no checkpoint fills (vocab shards).
  REFIT_ASSERT(local_shape_.empty() ? rows <= 1 : rows <= local_shape_[0]);
  data_ = Tensor::empty(local_shape_, stored_dtype, Device::cpu(), StorageUse::weights);
  data_.set_read_only(true);
}

Parameter::Parameter(std::string name, Shape shape, DType stored_dtype)
    : Parameter(name, shape, stored_dtype,
                {SubShard{name, shape, -1, 0, 0, 0, shape.empty() ? 1 : shape[0]}}) {}

// A sub-shard of several ranges (a fused checkpoint tensor split across ranks) must take
// distinct rows of its tensor, exactly filling its local rows: each stored row then derives
// from one checkpoint row, and readback can put every rank's rows back where they came from.
void Parameter::check_ranges(const SubShard& s) const {
  if (s.split_dim != 0 || s.checkpoint_shape.empty())
    fail(
        "parameter '{}': '{}' has several ranges along dim {}; only row ranges (dim 0) are "
        "supported",
        name_, s.checkpoint_name, s.split_dim);
  std::vector<SliceRange> ranges = s.slices();
  int64_t total = 0;
  for (const SliceRange& r : ranges) {
    if (r.length <= 0 || r.start < 0 || r.start + r.length > s.checkpoint_shape[0])
      fail("parameter '{}': rows {}..{} outside '{}' ({} rows)", name_, r.start, r.start + r.length,
           s.checkpoint_name, s.checkpoint_shape[0]);
    total += r.length;
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const SliceRange& a, const SliceRange& b) { return a.start < b.start; });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].start < ranges[i - 1].start + ranges[i - 1].length)
      fail("parameter '{}': ranges of '{}' overlap ({})", name_, s.checkpoint_name, s.slices_str());
  if (total != s.local_rows)
    fail("parameter '{}': ranges of '{}' ({}) hold {} rows, not its {} local rows", name_,
         s.checkpoint_name, s.slices_str(), total, s.local_rows);
}

const SubShard* Parameter::find_sub_shard(const std::string& checkpoint_name) const {
  for (const SubShard& s : sub_shards_)
    if (s.checkpoint_name == checkpoint_name) return &s;
  return nullptr;
}

bool Parameter::transposed() const {
  return std::count(transforms_.begin(), transforms_.end(), LayoutTransform::transpose) % 2 == 1;
}

std::string Parameter::sharding_str() const {
  if (world_ == 1 && sub_shards_.size() == 1) return "replicated";
  std::string s = fmt::format("rank {} of {}, row dim {}:", rank_, world_, row_dim());
  for (const SubShard& sub : sub_shards_) {
    s += fmt::format(" rows {}..{} <- {}", sub.local_row_offset,
                     sub.local_row_offset + sub.local_rows, sub.checkpoint_name);
    if (sub.split_dim >= 0) s += fmt::format("[dim {}: {}]", sub.split_dim, sub.slices_str());
  }
  return s;
}

Tensor Parameter::matmul_view() const { return transposed() ? data_.transpose(0, 1) : data_; }

Tensor Parameter::writable() const {
  Tensor w = data_;
  w.set_read_only(false);
  return w;
}

void Parameter::check_declared(const SubShard& sub, const Shape& shape, DType dtype,
                               Device device) const {
  const std::string& what = sub.checkpoint_name;
  // A scale stored as a scalar is the one value of its [1] parameter.
  const bool scalar_scale = positive_scale_ && shape.empty() && sub.checkpoint_shape == Shape{1};
  if (shape != sub.checkpoint_shape && !scalar_scale)
    fail("'{}': expected shape {}{}, got {}", what, shape_str(sub.checkpoint_shape),
         positive_scale_ ? " or a scalar []" : "", shape_str(shape));
  switch (dtype) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::f64:
      break;
    default:
      // A quantized weight is sent as the float tensor a trainer holds (it is re-quantized
      // here); its stored codes, as state_dict() exports them, are not a weight update.
      if (quant_.enabled())
        fail(
            "'{}': dtype {} is not a weight; this parameter is stored {} and re-quantizes what it "
            "is sent "
            "(send f32, f16 or bf16)",
            what, dtype_name(dtype), quant_.name());
      fail("'{}': dtype {} cannot be converted to the parameter's {} (send f32, f16 or bf16)", what,
           dtype_name(dtype), dtype_name(data_.dtype()));
  }
  if (device.type != DeviceType::cpu)
    fail("'{}': tensor is on {}, but this engine's weights live on the cpu", what, device.str());
}

float Parameter::static_input_scale() const {
  if (input_scales_.empty()) fail("parameter '{}' has no static input scales", name_);
  float s = 0.0f;
  for (const Parameter* p : input_scales_) s = std::max(s, p->data().data<const float>()[0]);
  return s;
}

void Parameter::check_loadable(const SubShard& sub, const Tensor& full, bool check_finite) const {
  if (!full.defined()) fail("parameter '{}': no tensor given for '{}'", name_, sub.checkpoint_name);
  check_declared(sub, full.shape(), full.dtype(), full.device());
  if (positive_scale_)
    for (float v : full.to_floats())
      if (!(std::isfinite(v) && v > 0.0f))
        fail("'{}': the scale is {}; it must be finite and positive", sub.checkpoint_name, v);
  if (check_finite) require_finite(sub, full);
}

Tensor Parameter::transformed(const Tensor& rows) const {
  Tensor t = rows;
  for (LayoutTransform tr : transforms_) {
    switch (tr) {
      case LayoutTransform::transpose:
        t = t.transpose(0, 1).contiguous();
        break;
      case LayoutTransform::shuffle_16x16:
        t = shuffle_16x16(t);
        break;
      case LayoutTransform::interleave_4x16:
        t = interleave_4x16(t);
        break;  // quantized only
    }
  }
  return t;
}

void Parameter::load(const SubShard& sub, const Tensor& full) {
  check_loadable(sub, full);
  loaded_ = true;
  if (quant_.enabled()) {
    if (sub.split_dim >= 0 &&
        (quant_.method == QuantMethod::fp8_tensor || quant_.method == QuantMethod::fp8_channel)) {
      // A TP slice of a per-tensor / per-channel weight takes the scales of the whole
      // checkpoint tensor (its amax, each whole row's): every rank then stores its slice of
      // what one rank stores, and a refit equals a fresh load of a checkpoint quantized from
      // these values. The whole tensor is quantized (read in its own dtype) into one
      // parameter's worth of staging codes and stored as a pre-quantized one would be.
      const int64_t n = full.size(0), k = full.size(1);
      Tensor codes = Tensor::empty({n, k}, DType::f8_e4m3fn);
      Tensor scales = Tensor::empty({n, 1}, DType::f32);
      quantize_tensor(quant_, full, codes.raw_data(), scales.raw_data(), Layout::strided);
      load_codes(sub, codes, scales, quant_.method);
      return;
    }
    // The slice in its own dtype: the quantizer widens it row by row (no f32 copy).
    Tensor rows = sub.slice(full);
    if (rows.shape() != sub.local_shape()) rows = rows.reshape(sub.local_shape());
    load_quantized(sub, rows);
    return;
  }
  if (transforms_.empty()) {
    // No layout transform: convert straight into the stored rows (row_dim() is 0). A staging
    // buffer would add a second pass over the bytes and a fresh, zeroed allocation per
    // tensor, which dominated refit time (bench/RESULTS.md, "refit throughput").
    copy_slices(sub, full, writable().narrow(0, sub.local_row_offset, sub.local_rows));
    return;
  }
  // Stage only this sub-shard's rows: extra memory is bounded by one parameter.
  Tensor rows = Tensor::empty(sub.local_shape(), data_.dtype());
  copy_slices(sub, full, rows);
  if (local_shape_.size() <= 1) {  // vectors: no layout transforms
    writable()
        .narrow(0, sub.local_row_offset, sub.local_rows)
        .copy_from(rows.view({sub.local_rows}));
    return;
  }
  Tensor stored_rows = transformed(rows);
  Tensor region = writable().narrow(row_dim(), sub.local_row_offset, sub.local_rows);
  if (transposed()) {
    region.copy_from(stored_rows);
  } else {
    // Row ranges are contiguous in memory for the plain and the shuffled layout (a
    // shuffle tile never crosses a 16-row boundary, and sub-shards start on one).
    std::memcpy(region.raw_data(), stored_rows.raw_data(), stored_rows.nbytes());
  }
}

void Parameter::copy_slices(const SubShard& sub, const Tensor& full, Tensor dst) const {
  if (sub.more_slices.empty()) {
    Tensor source = sub.slice(full);
    dst.copy_from(source.shape() == dst.shape() ? source : source.reshape(dst.shape()));
    return;
  }
  // Each range straight from the checkpoint tensor to its rows (no concatenated copy).
  int64_t row = 0;
  for (const SliceRange& r : sub.slices()) {
    dst.narrow(0, row, r.length).copy_from(full.narrow(0, r.start, r.length));
    row += r.length;
  }
}

void Parameter::load(const Tensor& full) {
  if (sub_shards_.size() != 1)
    fail("parameter '{}' is fused from {} checkpoint tensors; load each by name", name_,
         sub_shards_.size());
  load(sub_shards_[0], full);
}

std::string Parameter::transform_unsupported_reason(LayoutTransform t) const {
  if (local_shape_.size() != 2) return "only 2-d weights take layout transforms";
  if (quant_.enabled()) {
    if (t == LayoutTransform::transpose) return "quantized weights keep their [N, K] code layout";
    if (std::find(transforms_.begin(), transforms_.end(), t) != transforms_.end())
      return fmt::format("already {} (the transform is not idempotent)",
                         layout_name(data_.layout()));
    if (!transforms_.empty())
      return fmt::format("already in kernel layout {}; one kernel layout per weight",
                         layout_name(data_.layout()));
    if (t == LayoutTransform::interleave_4x16) {
      // Only the integer-dot W8A8 kernel reads this layout (the f32-activation Q8_0
      // kernels would find no kernel for it).
      if (quant_.method != QuantMethod::q8_0 || !quant_.w8a8)
        return fmt::format(
            "interleave_4x16 is read by the q8_0-w8a8 kernel only; this weight is {}",
            quant_.name());
      return {};
    }
    const int64_t row_bytes = code_row_bytes(quant_, local_shape_[1]);
    if (local_shape_[0] % 16 != 0)
      return fmt::format("N = {} is not a multiple of 16", local_shape_[0]);
    if (row_bytes % 32 != 0)
      return fmt::format("rows of {} code bytes do not tile into 32-byte tiles", row_bytes);
    for (const SubShard& s : sub_shards_)
      if (s.local_row_offset % 16 != 0 || s.local_rows % 16 != 0)
        return fmt::format("rows of '{}' ({}..{}) do not start and end on 16-row tiles",
                           s.checkpoint_name, s.local_row_offset,
                           s.local_row_offset + s.local_rows);
    return {};
  }
  switch (t) {
    case LayoutTransform::transpose:
      if (!transforms_.empty()) return "transpose must be the first transform";
      return {};
    case LayoutTransform::shuffle_16x16: {
      if (std::find(transforms_.begin(), transforms_.end(), t) != transforms_.end())
        return "already shuffled (the shuffle is not idempotent)";
      if (transposed()) return "a transposed weight cannot be shuffled";
      std::string why =
          shuffle_16x16_unsupported_reason(local_shape_[0], local_shape_[1], data_.dtype());
      if (!why.empty()) return why;
      for (const SubShard& s : sub_shards_)
        if (s.local_row_offset % 16 != 0 || s.local_rows % 16 != 0)
          return fmt::format("rows of '{}' ({}..{}) do not start and end on 16-row tiles",
                             s.checkpoint_name, s.local_row_offset,
                             s.local_row_offset + s.local_rows);
      return {};
    }
    case LayoutTransform::interleave_4x16:
      return "interleave_4x16 is a layout of Q8_0 codes: quantize the weight with q8_0-w8a8 first";
  }
  return "unknown transform";
}

void Parameter::apply_transform(LayoutTransform t) {
  std::string why = transform_unsupported_reason(t);
  if (!why.empty())
    fail("parameter '{}': cannot apply {}: {}", name_, layout_transform_name(t), why);
  if (quant_.enabled()) {
    relayout_quantized(t);
    transforms_.push_back(t);
    return;
  }
  Tensor current = data_.clone();  // transient copy of one parameter
  Tensor result;
  switch (t) {
    case LayoutTransform::transpose:
      result = current.transpose(0, 1).contiguous();
      break;
    case LayoutTransform::shuffle_16x16:
      result = shuffle_16x16(current);
      break;
    case LayoutTransform::interleave_4x16:
      result = interleave_4x16(current);
      break;  // refused above
  }
  // Same storage, new view: the address never changes.
  void* before = data_.storage()->data();
  std::memcpy(before, result.raw_data(), result.nbytes());
  data_ = Tensor::from_storage(data_.storage(), data_.dtype(), result.shape());
  data_.set_layout(result.layout());
  data_.set_read_only(true);
  transforms_.push_back(t);
  REFIT_ASSERT(data_.storage()->data() == before);
}

// ---- quantization ----

std::string Parameter::quantization_unsupported_reason(const QuantScheme& scheme) const {
  if (!scheme.enabled()) return "no quantization scheme given";
  if (local_shape_.size() != 2) return "only 2-d weights are quantized";
  if (quant_.enabled()) return fmt::format("already quantized ({})", quant_.name());
  if (loaded_ || !transforms_.empty())
    return "already loaded or transformed (quantization is chosen when the parameter is created)";
  return scheme.unsupported_reason(local_shape_[1]);
}

void Parameter::set_quantization(const QuantScheme& scheme) {
  std::string why = quantization_unsupported_reason(scheme);
  if (!why.empty()) fail("parameter '{}': cannot quantize to {}: {}", name_, scheme.name(), why);
  logical_dtype_ = data_.dtype();
  quant_ = scheme;
  // Allocated once, before any load; every later load writes into these two storages.
  data_ = Tensor::empty(local_shape_, scheme.code_dtype(), Device::cpu(), StorageUse::weights);
  data_.set_read_only(true);
  scale_ =
      Tensor::empty({local_shape_[0], scheme.scale_cols(local_shape_[1])}, scheme.scale_dtype());
  scale_.set_read_only(true);
}

void Parameter::load_quantized(const SubShard& sub, const Tensor& rows) {
  const int64_t k = local_shape_[1];
  const int64_t row_bytes = code_row_bytes(quant_, k), s = scale_.size(1);
  const size_t scale_size = dtype_nbytes(scale_.dtype(), 1);
  // A sub-shard's rows are one contiguous byte range in every layout (tiles never cross
  // a 16-row boundary, and shuffled sub-shards start on one; the interleave stays within
  // each row), for codes and scales, so the quantizer writes them in place, already in
  // the parameter's kernel layout (its one transform, if any: shuffle or interleave).
  auto* code_base = static_cast<uint8_t*>(data_.storage()->data());
  auto* scale_base = static_cast<uint8_t*>(scale_.storage()->data());
  quantize_tensor(quant_, rows, code_base + sub.local_row_offset * row_bytes,
                  scale_base + static_cast<size_t>(sub.local_row_offset * s) * scale_size,
                  data_.layout());
}

Tensor Parameter::dequantized(int64_t row0, int64_t rows) const {
  if (!quant_.enabled()) fail("parameter '{}' is not quantized", name_);
  const int64_t n = local_shape_[0], k = local_shape_[1];
  if (rows < 0) rows = n - row0;
  if (row0 < 0 || row0 + rows > n)
    fail("parameter '{}': rows [{}, {}) outside its {}", name_, row0, row0 + rows, n);
  // Shuffled codes and scales are decoded by whole 16-row tiles (each tile stands alone).
  const bool tiles = data_.layout() == Layout::shuffled_16x16;
  const int64_t first = tiles ? row0 / 16 * 16 : row0,
                end = tiles ? std::min(n, (row0 + rows + 15) / 16 * 16) : row0 + rows;
  const int64_t count = end - first, s = scale_.size(1);
  const size_t scale_row = static_cast<size_t>(s) * dtype_nbytes(scale_.dtype(), 1);
  Tensor codes = code_bytes(first, count);
  codes.set_layout(data_.layout());
  if (codes.layout() == Layout::shuffled_16x16)
    codes = unshuffle_16x16(codes);
  else if (codes.layout() == Layout::interleaved_4x16)
    codes = deinterleave_4x16(codes);
  std::vector<uint8_t> scales(static_cast<size_t>(count) * scale_row);
  std::memcpy(scales.data(),
              static_cast<const uint8_t*>(scale_.storage()->data()) + first * scale_row,
              scales.size());
  if (scale_.layout() == Layout::shuffled_16x16)
    shuffle_scales_16(scales.data(), count, s, scale_groups_per_tile(quant_),
                      dtype_nbytes(scale_.dtype(), 1),
                      /*inverse=*/true);
  Tensor out = Tensor::empty({count, k}, DType::f32);
  dequantize_rows(quant_, codes.contiguous().raw_data(), scales.data(), count, k,
                  out.data<float>());
  return out.narrow(0, row0 - first, rows).contiguous();
}

void Parameter::relayout_quantized(LayoutTransform t) {
  const int64_t n = local_shape_[0];
  void* before = data_.storage()->data();
  // The transforms write a new tensor, so the codes are read in place and copied back.
  const Tensor relaid = t == LayoutTransform::interleave_4x16 ? interleave_4x16(code_bytes(0, n))
                                                              : shuffle_16x16(code_bytes(0, n));
  std::memcpy(before, relaid.raw_data(), relaid.nbytes());
  data_.set_layout(relaid.layout());
  // The scales follow the shuffle's tiles (Q8_0, MXFP4), never the interleave.
  if (t == LayoutTransform::shuffle_16x16 && scales_follow_tiles(quant_)) {
    shuffle_scales_16(scale_.storage()->data(), n, scale_.size(1), scale_groups_per_tile(quant_),
                      dtype_nbytes(scale_.dtype(), 1));
    scale_.set_layout(Layout::shuffled_16x16);
  }
  REFIT_ASSERT(data_.storage()->data() == before);
}

Tensor Parameter::code_bytes(int64_t first, int64_t count) const {
  const int64_t row_bytes = code_row_bytes(quant_, local_shape_[1]);
  return Tensor::from_storage(data_.storage(), DType::u8, {count, row_bytes}, {},
                              first * row_bytes);
}

}  // namespace refit
