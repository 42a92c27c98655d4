// A model parameter: owned by its layer for the engine's life and never replaced
// (law L2). Its storage is allocated once; loading new weights converts and copies
// into that same storage, so its address is stable across any number of reloads.
//
// It knows its checkpoint (Hugging Face) name, the logical shape and dtype a trainer
// sends, and the dtype it is stored in. Loading validates before writing anything.
#pragma once

#include <string>

#include "core/tensor.h"

namespace refit {

class Parameter {
 public:
  Parameter(std::string name, Shape logical_shape, DType stored_dtype);
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  const std::string& name() const { return name_; }
  const Shape& logical_shape() const { return logical_shape_; }
  DType dtype() const { return data_.dtype(); }
  // The stored tensor. Exported read-only: the engine forbids writes from outside.
  const Tensor& data() const { return data_; }

  // Throws (naming this parameter, expected and actual shape) unless `source` can be
  // loaded; writes nothing.
  void check_loadable(const Tensor& source) const;
  // check_loadable, then convert `source` (any float dtype, any strides) into the
  // existing storage.
  void load(const Tensor& source);

 private:
  std::string name_;
  Shape logical_shape_;
  Tensor data_;
};

}  // namespace refit
