#include "weights/parameter_set.h"

#include "core/error.h"

namespace refit {

Parameter& ParameterSet::add(std::unique_ptr<Parameter> p) {
  if (by_name_.count(p->name())) fail("parameter '{}' is defined twice", p->name());
  for (const SubShard& s : p->sub_shards()) {
    if (by_checkpoint_name_.count(s.checkpoint_name))
      fail("checkpoint tensor '{}' would fill two parameters", s.checkpoint_name);
    by_checkpoint_name_[s.checkpoint_name] = {p.get(), &s};
  }
  by_name_[p->name()] = p.get();
  params_.push_back(std::move(p));
  return *params_.back();
}

Parameter& ParameterSet::add(std::string name, Shape shape, DType dtype) {
  return add(std::make_unique<Parameter>(std::move(name), std::move(shape), dtype));
}

Parameter* ParameterSet::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

Parameter& ParameterSet::get(std::string_view name) const {
  if (Parameter* p = find(name)) return *p;
  fail("unknown parameter '{}'", name);
}

CheckpointTarget ParameterSet::target(std::string_view checkpoint_name) const {
  auto it = by_checkpoint_name_.find(std::string(checkpoint_name));
  return it == by_checkpoint_name_.end() ? CheckpointTarget{} : it->second;
}

std::vector<std::string> ParameterSet::checkpoint_names() const {
  std::vector<std::string> names;
  for (const auto& p : params_)
    for (const SubShard& s : p->sub_shards()) names.push_back(s.checkpoint_name);
  return names;
}

void ParameterSet::add_alias(CheckpointAlias alias) {
  if (by_checkpoint_name_.count(alias.name) || alias_index_.count(alias.name))
    fail("checkpoint tensor '{}' would be both a parameter's and a stacked form", alias.name);
  for (const AliasPart& part : alias.parts)
    if (!by_checkpoint_name_.count(part.name))
      fail("stacked tensor '{}': no parameter takes its part '{}'", alias.name, part.name);
  alias_index_[alias.name] = aliases_.size();
  aliases_.push_back(std::move(alias));
}

void ParameterSet::add_elsewhere(std::string name) { elsewhere_.insert(std::move(name)); }

bool ParameterSet::elsewhere(std::string_view name) const {
  return elsewhere_.count(std::string(name)) > 0;
}

const CheckpointAlias* ParameterSet::alias(std::string_view name) const {
  auto it = alias_index_.find(std::string(name));
  return it == alias_index_.end() ? nullptr : &aliases_[it->second];
}

size_t ParameterSet::total_bytes() const {
  size_t n = 0;
  for (const auto& p : params_) n += p->data().nbytes();
  return n;
}

}  // namespace refit
