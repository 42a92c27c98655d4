// The parameters of one model, by canonical (Hugging Face) name, in creation order.
// Layers create their parameters here; loaders and refit find them by name.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weights/parameter.h"

namespace refit {

class ParameterSet {
 public:
  Parameter& add(std::string name, Shape shape, DType dtype);
  Parameter* find(std::string_view name) const;
  Parameter& get(std::string_view name) const;  // throws naming the unknown parameter
  const std::vector<std::unique_ptr<Parameter>>& all() const { return params_; }
  size_t total_bytes() const;

 private:
  std::vector<std::unique_ptr<Parameter>> params_;
  std::unordered_map<std::string, Parameter*> by_name_;
};

}  // namespace refit
