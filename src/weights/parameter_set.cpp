#include "weights/parameter_set.h"

#include "core/error.h"

namespace refit {

Parameter& ParameterSet::add(std::string name, Shape shape, DType dtype) {
  if (by_name_.count(name)) fail("parameter '{}' is defined twice", name);
  params_.push_back(std::make_unique<Parameter>(name, std::move(shape), dtype));
  by_name_[name] = params_.back().get();
  return *params_.back();
}

Parameter* ParameterSet::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

Parameter& ParameterSet::get(std::string_view name) const {
  if (Parameter* p = find(name)) return *p;
  fail("unknown parameter '{}'", name);
}

size_t ParameterSet::total_bytes() const {
  size_t n = 0;
  for (const auto& p : params_) n += p->data().nbytes();
  return n;
}

}  // namespace refit
