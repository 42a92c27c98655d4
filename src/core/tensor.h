// Tensor: a typed, shaped, strided view of a Storage. Views (slice, narrow, view,
// transpose, permute) never copy; they share the storage. Strides and the offset count
// elements, not bytes. Shapes are row-major by default: the last dimension is fastest.
//
// A tensor also carries a Layout tag: `strided` is the plain layout described by the
// strides; any other value is a kernel-specific arrangement of the same bytes (for
// example the (16,16) tile shuffle), which dispatch (law L3) uses to choose kernels.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/storage.h"

namespace refit {

enum class Layout : uint8_t {
  strided,           // plain: element (i, j, ...) at offset + sum(index * stride)
  shuffled_16x16,    // AITER shuffle_weight(w, (16, 16)) of a row-major [N, K] matrix
  interleaved_4x16,  // 1-byte codes, each row's runs of 16 blocks of 32 stored 4 bytes of
                     // every block at a time (kernels/interleave_4x16.h)
};
const char* layout_name(Layout l);

using Shape = std::vector<int64_t>;
std::string shape_str(std::span<const int64_t> shape);  // "[2, 3]"

class Tensor {
 public:
  Tensor() = default;  // undefined tensor: defined() is false

  // New contiguous tensor, zero-filled (unless `use` is StorageUse::overwritten: then its
  // contents are unspecified until written).
  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu(),
                      StorageUse use = StorageUse::general);
  static Tensor zeros(Shape shape, DType dtype, Device device = Device::cpu()) {
    return empty(std::move(shape), dtype, device);
  }
  // Contiguous f32 tensor holding `values` (tests and small tables).
  static Tensor from_floats(Shape shape, std::span<const float> values);
  // A view over an existing storage.
  static Tensor from_storage(std::shared_ptr<Storage> storage, DType dtype, Shape shape,
                             Shape strides = {}, int64_t offset = 0);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const;
  Layout layout() const { return layout_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  size_t nbytes() const;  // bytes covered by the elements (numel for contiguous)
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Byte address of element 0 (storage base + offset).
  void* raw_data() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }

  // Engine-side write protection: exported read-only through DLPack; writes through
  // copy_from() refuse. A tensor over a read-only storage (a file mapping) is read-only.
  bool read_only() const;
  Tensor& set_read_only(bool ro) {
    read_only_ = ro;
    return *this;
  }
  Tensor& set_layout(Layout l) {
    layout_ = l;
    return *this;
  }

  // ---- views (no copy) ----
  Tensor view(Shape shape) const;     // needs a compatible (contiguous) layout; one -1 allowed
  Tensor reshape(Shape shape) const;  // view if possible, else contiguous() copy
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;  // drops `dim`
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(std::span<const int64_t> dims) const;
  Tensor permute(std::initializer_list<int64_t> dims) const {
    return permute(std::span<const int64_t>(dims.begin(), dims.size()));
  }

  // ---- copies ----
  Tensor contiguous() const;  // self if already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor to(DType dtype) const;
  // A contiguous copy on `device` (self if already there). Crossing devices needs a
  // contiguous tensor and a backend for the device (DeviceAllocator in core/storage.h).
  Tensor to(Device device) const;
  // Element-wise copy of `src` into this tensor's existing storage (any strides, dtype
  // conversion through f32 for floats). The storage address does not change.
  // When either side is not on the CPU (or the two are on different devices), both must
  // be contiguous and of the same dtype: the bytes are copied by the device's allocator.
  void copy_from(const Tensor& src);

  // ---- element access for tests and small tables (slow) ----
  // get/set need a CPU tensor; to_floats() copies a device tensor to the CPU first.
  double get(std::span<const int64_t> index) const;
  double get(std::initializer_list<int64_t> index) const {
    return get(std::span<const int64_t>(index.begin(), index.size()));
  }
  void set(std::span<const int64_t> index, double value);
  void set(std::initializer_list<int64_t> index, double value) {
    set(std::span<const int64_t>(index.begin(), index.size()), value);
  }
  std::vector<float> to_floats() const;  // all elements in row-major order

  std::string str() const;  // "f32[2, 3] cpu strided"

 private:
  void copy_across_devices(const Tensor& src);  // copy_from when a side is not on the CPU

  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::f32;
  Layout layout_ = Layout::strided;
  bool read_only_ = false;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
};

Shape contiguous_strides(const Shape& shape);

}  // namespace refit
