#include "weights/weight_update.h"

#include "core/error.h"

namespace refit {

void WeightUpdate::update(const std::string& name, const Tensor& tensor) {
  if (finished_) fail("weight update: the transaction has already been committed or aborted");
  try {
    CheckpointTarget target = params_.target(name);
    if (!target.parameter) fail("weight update: unknown tensor '{}' (no parameter takes it)", name);
    target.parameter->check_loadable(*target.sub_shard, tensor, options_.check_finite);
    for (auto& [t, staged] : pending_)
      if (t.sub_shard == target.sub_shard) {
        staged = tensor;  // the later tensor for the same name wins
        return;
      }
    pending_.emplace_back(target, tensor);
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
  if (failed()) fail("weight update: refusing to commit after a refused tensor ({}); abort it", failure_);
  for (auto& [target, tensor] : pending_) target.parameter->load(*target.sub_shard, tensor);
  pending_.clear();
  owners_.clear();
  finished_ = true;
}

}  // namespace refit
