#include "weights/weight_update.h"

#include "core/error.h"

namespace refit {

void WeightUpdate::stage(const std::string& name, Staged staged) {
  for (Staged& s : pending_)
    if (s.target.sub_shard == staged.target.sub_shard) {
      s = std::move(staged);  // the later tensor for the same name wins
      return;
    }
  pending_.push_back(std::move(staged));
}

std::vector<const SubShard*> WeightUpdate::staged_sub_shards() const {
  std::vector<const SubShard*> out;
  for (const Staged& s : pending_) out.push_back(s.target.sub_shard);
  return out;
}

void WeightUpdate::update(const std::string& name, const Tensor& tensor) {
  if (finished_) fail("weight update: the transaction has already been committed or aborted");
  try {
    CheckpointTarget target = params_.target(name);
    if (!target.parameter) fail("weight update: unknown tensor '{}' (no parameter takes it)", name);
    target.parameter->check_loadable(*target.sub_shard, tensor, options_.check_finite);
    stage(name, {target, tensor, nullptr, Tensor(), QuantMethod::none});
  } catch (const Error& e) {
    if (failure_.empty()) failure_ = e.what();
    throw;
  }
}

void WeightUpdate::update_lazy(const std::string& name, const Shape& shape, DType dtype,
                               std::function<Tensor()> produce) {
  if (finished_) fail("weight update: the transaction has already been committed or aborted");
  try {
    CheckpointTarget target = params_.target(name);
    if (!target.parameter) fail("weight update: unknown tensor '{}' (no parameter takes it)", name);
    target.parameter->check_declared(*target.sub_shard, shape, dtype, Device::cpu());
    // A scale's value is checked now (it is one number), so a bad one fails the staging.
    if (options_.check_finite || target.parameter->positive_scale())
      target.parameter->check_loadable(*target.sub_shard, produce(), options_.check_finite);
    stage(name, {target, Tensor(), std::move(produce), Tensor(), QuantMethod::none});
  } catch (const Error& e) {
    if (failure_.empty()) failure_ = e.what();
    throw;
  }
}

void WeightUpdate::update_codes(const std::string& name, const Tensor& codes, const Tensor& scales,
                                QuantMethod stored) {
  if (finished_) fail("weight update: the transaction has already been committed or aborted");
  try {
    CheckpointTarget target = params_.target(name);
    if (!target.parameter) fail("weight update: unknown tensor '{}' (no parameter takes it)", name);
    target.parameter->check_codes_loadable(*target.sub_shard, codes, scales, stored,
                                           options_.check_finite);
    stage(name, {target, codes, nullptr, scales, stored});
  } catch (const Error& e) {
    if (failure_.empty()) failure_ = e.what();
    throw;
  }
}

void WeightUpdate::abort() {
  pending_.clear();
  owners_.clear();
  finished_ = true;
}

void WeightUpdate::apply() {
  if (finished_) fail("weight update: the transaction has already been committed or aborted");
  if (failed())
    fail("weight update: refusing to commit after a refused tensor ({}); abort it", failure_);
  for (Staged& s : pending_) {
    if (s.scales.defined()) {
      s.target.parameter->load_codes(*s.target.sub_shard, s.tensor, s.scales, s.stored);
      s = Staged{};
      continue;
    }
    Tensor tensor = s.tensor.defined() ? s.tensor : s.produce();
    s.target.parameter->load(*s.target.sub_shard, tensor);
    s = Staged{};  // release a produced tensor before making the next one
  }
  pending_.clear();
  owners_.clear();
  finished_ = true;
}

}  // namespace refit
