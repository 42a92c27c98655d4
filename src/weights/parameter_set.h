// The parameters of one model in creation order, found by parameter name or by the
// checkpoint tensor name that fills (part of) them. Layers create their parameters
// here; loaders and refit look them up.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "weights/checkpoint_alias.h"
#include "weights/parameter.h"

namespace refit {

struct CheckpointTarget {
  Parameter* parameter = nullptr;
  const SubShard* sub_shard = nullptr;
};

class ParameterSet {
 public:
  Parameter& add(std::unique_ptr<Parameter> parameter);
  Parameter& add(std::string name, Shape shape, DType dtype);  // unfused, replicated
  Parameter* find(std::string_view name) const;
  Parameter& get(std::string_view name) const;  // throws naming the unknown parameter
  // Where a checkpoint tensor goes; parameter null when no parameter takes it.
  CheckpointTarget target(std::string_view checkpoint_name) const;
  // Every checkpoint tensor name the parameters take, in parameter order.
  std::vector<std::string> checkpoint_names() const;
  const std::vector<std::unique_ptr<Parameter>>& all() const { return params_; }
  // A tensor that holds several checkpoint tensors in another form (a Hugging Face stack of
  // experts, weights/checkpoint_alias.h); every part must name a checkpoint tensor a
  // parameter takes, and the alias's name none.
  void add_alias(CheckpointAlias alias);
  const CheckpointAlias* alias(std::string_view name) const;  // null when none
  const std::vector<CheckpointAlias>& aliases() const { return aliases_; }
  // A checkpoint tensor another rank's parameters take (expert parallelism: the experts this
  // rank does not hold): updates accept it and leave it to that rank.
  void add_elsewhere(std::string checkpoint_name);
  bool elsewhere(std::string_view checkpoint_name) const;
  size_t total_bytes() const;

 private:
  std::vector<std::unique_ptr<Parameter>> params_;
  std::unordered_map<std::string, Parameter*> by_name_;
  std::unordered_map<std::string, CheckpointTarget> by_checkpoint_name_;
  std::vector<CheckpointAlias> aliases_;
  std::unordered_set<std::string> elsewhere_;
  std::unordered_map<std::string, size_t> alias_index_;
};

}  // namespace refit
