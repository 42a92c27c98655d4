#include "weights/parameter.h"

#include "core/error.h"

namespace refit {

Parameter::Parameter(std::string name, Shape logical_shape, DType stored_dtype)
    : name_(std::move(name)), logical_shape_(std::move(logical_shape)) {
  data_ = Tensor::empty(logical_shape_, stored_dtype);
  data_.set_read_only(true);
}

void Parameter::check_loadable(const Tensor& source) const {
  if (!source.defined()) fail("parameter '{}': no tensor given", name_);
  if (source.shape() != logical_shape_)
    fail("parameter '{}': expected shape {}, got {}", name_, shape_str(logical_shape_),
         shape_str(source.shape()));
  if (!dtype_is_floating(source.dtype()))
    fail("parameter '{}': expected a floating-point tensor, got {}", name_,
         dtype_name(source.dtype()));
  if (source.device().type != DeviceType::cpu)
    fail("parameter '{}': tensor is on {}, this engine's weights live on the cpu", name_,
         source.device().str());
}

void Parameter::load(const Tensor& source) {
  check_loadable(source);
  Tensor writable = data_;
  writable.set_read_only(false);
  writable.copy_from(source);
}

}  // namespace refit
