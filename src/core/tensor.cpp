#include "core/tensor.h"

#include <fmt/format.h>

#include <cstring>
#include <numeric>

#include "core/bulk_bytes.h"
#include "core/element_access.h"
#include "core/error.h"
#include "core/float_convert.h"
#include "core/float_formats.h"

namespace refit {

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::strided:
      return "strided";
    case Layout::shuffled_16x16:
      return "shuffled_16x16";
    case Layout::interleaved_4x16:
      return "interleaved_4x16";
  }
  return "?";
}

std::string shape_str(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

namespace {

int64_t product(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void check_shape(const Shape& shape) {
  for (int64_t d : shape)
    if (d < 0) fail("invalid shape {}: negative dimension", shape_str(shape));
}

int64_t wrap_dim(int64_t d, int64_t ndim, const char* what) {
  if (d < 0) d += ndim;
  if (d < 0 || d >= ndim) fail("{}: dimension {} out of range for a {}-d tensor", what, d, ndim);
  return d;
}

// Calls fn(a_offset, b_offset) for every index of `shape`, in row-major order, with
// element offsets computed from two stride sets.
template <typename Fn>
void for_each_offset_pair(const Shape& shape, const Shape& sa, int64_t oa, const Shape& sb,
                          int64_t ob, Fn&& fn) {
  const int64_t n = product(shape);
  if (n == 0) return;
  const size_t nd = shape.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t a = oa, b = ob;
  for (int64_t i = 0; i < n; ++i) {
    fn(a, b);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < shape[d]) {
        a += sa[d];
        b += sb[d];
        break;
      }
      a -= sa[d] * (shape[d] - 1);
      b -= sb[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace

Tensor Tensor::empty(Shape shape, DType dtype, Device device, StorageUse use) {
  check_shape(shape);
  if (dtype_bits(dtype) < 8 && !shape.empty() && shape.back() % 2 != 0)
    fail("a {} tensor packs two values per byte: its last dimension must be even, got {}",
         dtype_name(dtype), shape_str(shape));
  Tensor t;
  t.storage_ = Storage::allocate(dtype_nbytes(dtype, product(shape)), device, use);
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::from_floats(Shape shape, std::span<const float> values) {
  if (product(shape) != static_cast<int64_t>(values.size()))
    fail("from_floats: shape {} needs {} values, got {}", shape_str(shape), product(shape),
         values.size());
  Tensor t = empty(std::move(shape), DType::f32);
  if (!values.empty())
    std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(float));  // data() may be null
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, DType dtype, Shape shape,
                            Shape strides, int64_t offset) {
  check_shape(shape);
  if (strides.empty()) strides = contiguous_strides(shape);
  if (strides.size() != shape.size())
    fail("from_storage: {} strides for a {}-d shape", strides.size(), shape.size());
  Tensor t;
  t.storage_ = std::move(storage);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.offset_ = offset;
  // The furthest element reached must lie inside the storage.
  if (t.numel() > 0) {
    int64_t lo = offset, hi = offset;
    for (size_t d = 0; d < t.shape_.size(); ++d) {
      int64_t span = t.strides_[d] * (t.shape_[d] - 1);
      (span < 0 ? lo : hi) += span;
    }
    if (lo < 0 || dtype_nbytes(dtype, hi + 1) > t.storage_->nbytes())
      fail("from_storage: {} {} with strides {} at offset {} exceeds its storage of {} bytes",
           dtype_name(dtype), shape_str(t.shape_), shape_str(t.strides_), offset,
           t.storage_->nbytes());
  }
  return t;
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

int64_t Tensor::size(int64_t d) const { return shape_[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides_[wrap_dim(d, dim(), "stride")]; }
int64_t Tensor::numel() const { return product(shape_); }
size_t Tensor::nbytes() const { return dtype_nbytes(dtype_, numel()); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  REFIT_ASSERT(storage_);
  return static_cast<uint8_t*>(storage_->data()) + (offset_ * dtype_bits(dtype_)) / 8;
}

bool Tensor::read_only() const { return read_only_ || (storage_ && !storage_->writable()); }

Tensor Tensor::view(Shape shape) const {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) fail("view: only one dimension may be -1 in {}", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0 && known != 0) shape[infer] = numel() / known;
  check_shape(shape);
  if (product(shape) != numel())
    fail("view: cannot view {} ({} elements) as {}", shape_str(shape_), numel(), shape_str(shape));
  if (!is_contiguous())
    fail("view: tensor with shape {} and strides {} is not contiguous; use reshape()",
         shape_str(shape_), shape_str(strides_));
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  return is_contiguous() ? view(std::move(shape)) : contiguous().view(std::move(shape));
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  if (step <= 0) fail("slice: step must be positive, got {}", step);
  const int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = (end - start + step - 1) / step;
  t.strides_[d] *= step;
  return t;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  if (start < 0 || length < 0 || start + length > shape_[d])
    fail("narrow: [{}, {}) is outside dimension {} of size {}", start, start + length, d,
         shape_[d]);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  if (index < 0) index += shape_[d];
  if (index < 0 || index >= shape_[d])
    fail("select: index {} out of range for dimension {} of size {}", index, d, shape_[d]);
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Tensor Tensor::permute(std::span<const int64_t> dims) const {
  if (static_cast<int64_t>(dims.size()) != dim())
    fail("permute: {} dims given for a {}-d tensor", dims.size(), dim());
  std::vector<bool> seen(dims.size(), false);
  Tensor t = *this;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    if (seen[d]) fail("permute: dimension {} repeated", d);
    seen[d] = true;
    t.shape_[i] = shape_[d];
    t.strides_[i] = strides_[d];
  }
  return t;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

// The copies below write every element of their fresh tensor: no zero fill first.
Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device(), StorageUse::overwritten);
  t.layout_ = layout_;
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t = empty(shape_, dtype, device(), StorageUse::overwritten);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor t = empty(shape_, dtype_, device, StorageUse::overwritten);
  t.layout_ = layout_;
  t.copy_from(*this);
  return t;
}

// Copies that involve device memory: host code cannot touch the bytes, so only what the
// device allocator can do as one block copy is allowed (contiguous, same dtype), and
// anything else is refused naming both tensors rather than read wrongly.
void Tensor::copy_across_devices(const Tensor& src) {
  const Device dst_dev = device(), src_dev = src.device();
  if (dst_dev.type != DeviceType::cpu && src_dev.type != DeviceType::cpu &&
      dst_dev.type != src_dev.type)
    fail(
        "copy_from: cannot copy between {} and {} directly; copy through the CPU "
        "(destination {}, source {})",
        dst_dev.str(), src_dev.str(), str(), src.str());
  if (src.dtype_ != dtype_ || !is_contiguous() || !src.is_contiguous())
    fail(
        "copy_from: a copy between {} and {} needs two contiguous tensors of the same dtype "
        "(destination {}, source {}); convert or make it contiguous on one device first",
        dst_dev.str(), src_dev.str(), str(), src.str());
  const DeviceType backend = dst_dev.type != DeviceType::cpu ? dst_dev.type : src_dev.type;
  DeviceAllocator* allocator = device_allocator(backend);
  if (!allocator)
    fail(
        "copy_from: no {} backend in this build to copy between {} and {} (destination {}, "
        "source {})",
        device_type_name(backend), dst_dev.str(), src_dev.str(), str(), src.str());
  if (numel() == 0) return;
  allocator->copy(raw_data(), dst_dev, src.raw_data(), src_dev, nbytes());
}

void Tensor::copy_from(const Tensor& src) {
  if (read_only()) fail("copy_from: destination {} is read-only", str());
  if (src.shape_ != shape_)
    fail("copy_from: shape mismatch, destination {} and source {}", shape_str(shape_),
         shape_str(src.shape_));
  if (device().type != DeviceType::cpu || src.device().type != DeviceType::cpu) {
    copy_across_devices(src);
    return;
  }
  if (numel() == 0) return;
  void* dst_base = storage_->data();
  const void* src_base = src.storage_->data();
  const bool both_contiguous = is_contiguous() && src.is_contiguous();
  if (src.dtype_ == dtype_ && both_contiguous && dtype_bits(dtype_) >= 8) {
    // Large copies run on the pool (a clone or a staged weight writes fresh pages, which
    // fault in faster from every thread); overlapping views keep memmove.
    const auto* d = static_cast<const uint8_t*>(raw_data());
    const auto* s = static_cast<const uint8_t*>(src.raw_data());
    const size_t n = nbytes();
    if (d + n <= s || s + n <= d)
      bulk_copy(raw_data(), src.raw_data(), n);
    else
      std::memmove(raw_data(), src.raw_data(), n);
    return;
  }
  if (both_contiguous && dtype_ == DType::f32 &&
      (src.dtype_ == DType::bf16 || src.dtype_ == DType::f16)) {
    const uint16_t* s = src.data<uint16_t>();
    float* d = data<float>();
    const int64_t n = numel();
    // Bulk converters (core/float_convert.h): bit-identical to the scalar functions, at
    // memory speed (a weight update converting a trainer's tensors runs through here).
    if (src.dtype_ == DType::bf16)
      convert_bf16_to_f32(s, d, n);
    else
      convert_f16_to_f32(s, d, n);
    return;
  }
  if (both_contiguous && src.dtype_ == DType::f32 &&
      (dtype_ == DType::bf16 || dtype_ == DType::f16)) {
    const float* s = src.data<float>();
    uint16_t* d = data<uint16_t>();
    const int64_t n = numel();
    if (dtype_ == DType::bf16)
      convert_f32_to_bf16(s, d, n);
    else
      convert_f32_to_f16(s, d, n);
    return;
  }
  const size_t elem_bytes = static_cast<size_t>(dtype_bits(dtype_) / 8);
  // Rows contiguous in both (a narrowed or sliced view, as splitting a fused QKV output):
  // one copy per row, not one per element (per element, the QKV split and its memcpy
  // calls took ~7% of an MXFP4 W8A8 pp128 profile on `medium`; row by row, 0.6%).
  if (src.dtype_ == dtype_ && elem_bytes > 0 && dim() >= 2 && strides_.back() == 1 &&
      src.strides_.back() == 1) {
    const Shape outer(shape_.begin(), shape_.end() - 1);
    const Shape dst_outer(strides_.begin(), strides_.end() - 1),
        src_outer(src.strides_.begin(), src.strides_.end() - 1);
    const size_t row_bytes = static_cast<size_t>(shape_.back()) * elem_bytes;
    for_each_offset_pair(
        outer, dst_outer, offset_, src_outer, src.offset_, [&](int64_t d, int64_t s) {
          std::memmove(static_cast<uint8_t*>(dst_base) + d * elem_bytes,
                       static_cast<const uint8_t*>(src_base) + s * elem_bytes, row_bytes);
        });
    return;
  }
  if (src.dtype_ == dtype_ && elem_bytes > 0) {
    for_each_offset_pair(
        shape_, strides_, offset_, src.strides_, src.offset_, [&](int64_t d, int64_t s) {
          std::memcpy(static_cast<uint8_t*>(dst_base) + d * elem_bytes,
                      static_cast<const uint8_t*>(src_base) + s * elem_bytes, elem_bytes);
        });
    return;
  }
  for_each_offset_pair(shape_, strides_, offset_, src.strides_, src.offset_,
                       [&](int64_t d, int64_t s) {
                         store_element(dst_base, dtype_, d, load_element(src_base, src.dtype_, s));
                       });
}

namespace {
int64_t element_offset(const Tensor& t, std::span<const int64_t> index) {
  if (static_cast<int64_t>(index.size()) != t.dim())
    fail("element access: {} indices for a {}-d tensor", index.size(), t.dim());
  int64_t off = t.offset();
  for (size_t i = 0; i < index.size(); ++i) {
    if (index[i] < 0 || index[i] >= t.shape()[i])
      fail("element access: index {} out of range for dimension {} of size {}", index[i], i,
           t.shape()[i]);
    off += index[i] * t.strides()[i];
  }
  return off;
}
}  // namespace

namespace {
void need_host(const Tensor& t, const char* what) {
  if (t.device().type != DeviceType::cpu)
    fail("{}: {} is on {}; copy it to the CPU first (to(Device::cpu()))", what, t.str(),
         t.device().str());
}
}  // namespace

double Tensor::get(std::span<const int64_t> index) const {
  need_host(*this, "get");
  return load_element(storage_->data(), dtype_, element_offset(*this, index));
}

void Tensor::set(std::span<const int64_t> index, double value) {
  if (read_only()) fail("set: tensor {} is read-only", str());
  need_host(*this, "set");
  store_element(storage_->data(), dtype_, element_offset(*this, index), value);
}

std::vector<float> Tensor::to_floats() const {
  if (device().type != DeviceType::cpu) return to(Device::cpu()).to_floats();
  std::vector<float> out(static_cast<size_t>(numel()));
  if (dtype_ == DType::f32 && is_contiguous()) {
    if (!out.empty()) std::memcpy(out.data(), raw_data(), out.size() * sizeof(float));
    return out;
  }
  Shape out_strides = contiguous_strides(shape_);
  const void* base = storage_->data();
  for_each_offset_pair(shape_, strides_, offset_, out_strides, 0, [&](int64_t s, int64_t d) {
    out[static_cast<size_t>(d)] = static_cast<float>(load_element(base, dtype_, s));
  });
  return out;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  std::string s = fmt::format("{}{} {} {}", dtype_name(dtype_), shape_str(shape_), device().str(),
                              layout_name(layout_));
  if (!is_contiguous()) s += fmt::format(" strides={}", shape_str(strides_));
  return s;
}

}  // namespace refit
