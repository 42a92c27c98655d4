#include "weights/weight_update.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "core/error.h"

namespace refit {
namespace {

constexpr uint64_t kCheckFinite = 1, kIgnoreUnknown = 2;

// Seconds since `start`, added to `total` however the scope is left.
class Stopwatch {
 public:
  explicit Stopwatch(double& total) : total_(total) {}
  ~Stopwatch() {
    total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Refuses an update holding a non-finite value; `problem` says which, naming the tensor.
[[noreturn]] void refuse_non_finite(const std::string& problem) {
  fail(
      "{}; a weight update must hold finite values (the finiteness check is on by default: "
      "check_finite false skips it)",
      problem);
}

}  // namespace

uint64_t UpdateOptions::bits() const {
  return (check_finite ? kCheckFinite : 0) | (ignore_unknown_tensors ? kIgnoreUnknown : 0);
}

UpdateOptions UpdateOptions::from_bits(uint64_t bits) {
  UpdateOptions o;
  o.check_finite = (bits & kCheckFinite) != 0;
  o.ignore_unknown_tensors = (bits & kIgnoreUnknown) != 0;
  return o;
}

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

const Parameter* WeightUpdate::target_or_ignore(const std::string& name, CheckpointTarget& target) {
  if (finished_) fail("weight update: the transaction has already been committed or aborted");
  target = params_.target(name);
  if (target.parameter) return target.parameter;
  if (params_.elsewhere(name)) return nullptr;  // another rank's (expert parallelism)
  if (!options_.ignore_unknown_tensors)
    fail(
        "weight update: unknown tensor '{}' (no parameter takes it; ignore_unknown_tensors true "
        "leaves such tensors out and lists them)",
        name);
  add_ignored({name});
  return nullptr;
}

void WeightUpdate::add_ignored(const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (std::find(ignored_.begin(), ignored_.end(), n) == ignored_.end()) ignored_.push_back(n);
}

void WeightUpdate::update(const std::string& name, const Tensor& tensor) {
  Stopwatch time(validate_seconds_);
  try {
    if (const CheckpointAlias* alias = params_.alias(name)) {
      if (finished_) fail("weight update: the transaction has already been committed or aborted");
      stage_stacked(*alias, tensor);
      return;
    }
    CheckpointTarget target;
    if (!target_or_ignore(name, target)) return;
    target.parameter->check_loadable(*target.sub_shard, tensor, options_.check_finite);
    stage(name, {target, tensor, nullptr, Tensor(), QuantMethod::none});
  } catch (const Error& e) {
    if (failure_.empty()) failure_ = e.what();
    throw;
  }
}

void WeightUpdate::stage_stacked(const CheckpointAlias& alias, const Tensor& tensor) {
  check_alias_tensor(alias, tensor);
  if (alias.form == AliasForm::values) {
    // Every part validated before any is staged: a bad part refuses the whole tensor.
    std::vector<Staged> parts;
    for (const AliasPart& part : alias.parts) {
      const CheckpointTarget target = params_.target(part.name);
      const Tensor view = alias_part_view(part, tensor);
      target.parameter->check_loadable(*target.sub_shard, view, options_.check_finite);
      parts.push_back({target, view, nullptr, Tensor(), QuantMethod::none});
    }
    for (size_t i = 0; i < parts.size(); ++i) stage(alias.parts[i].name, std::move(parts[i]));
    return;
  }
  // MXFP4 blocks and scales come as two tensors: the first waits for its partner.
  auto partner = half_staged_.find(alias.partner);
  if (partner == half_staged_.end()) {
    half_staged_[alias.name] = {&alias, tensor};
    return;
  }
  const bool blocks_first = alias.form == AliasForm::mxfp4_scales;
  const CheckpointAlias& blocks_alias = blocks_first ? *partner->second.first : alias;
  const CheckpointAlias& scales_alias = blocks_first ? alias : *partner->second.first;
  const Tensor blocks = blocks_first ? partner->second.second : tensor;
  const Tensor scales = blocks_first ? tensor : partner->second.second;
  half_staged_.erase(partner);
  if (options_.check_finite)
    if (const std::string problem = mxfp4_scales_non_finite(scales_alias, scales); !problem.empty())
      refuse_non_finite(problem);
  for (const AliasPart& part : blocks_alias.parts) {
    const CheckpointTarget target = params_.target(part.name);
    // An MXFP4 parameter stores the blocks as they are, as a fresh load of them does.
    if (BlockCodes codes = mxfp4_part_codes(part, blocks, scales);
        target.parameter->block_codes_unsupported_reason(*target.sub_shard, codes).empty()) {
      Staged staged{target, Tensor(), nullptr, Tensor(), QuantMethod::none};
      staged.shape = codes.shape;
      staged.block_codes = std::move(codes);
      stage(part.name, std::move(staged));
      continue;
    }
    const Tensor mine = alias_part_view(part, blocks);  // [rows, K/32, 16]
    Staged staged{target, Tensor(),
                  [part, blocks, scales] { return decode_mxfp4_part(part, blocks, scales); },
                  Tensor(), QuantMethod::none};
    staged.shape = {mine.size(0), mine.size(1) * 32};
    staged.dtype = DType::f32;
    target.parameter->check_declared(*target.sub_shard, staged.shape, staged.dtype, Device::cpu());
    stage(part.name, std::move(staged));
  }
}

void WeightUpdate::update_lazy(const std::string& name, const Shape& shape, DType dtype,
                               std::function<Tensor()> produce,
                               const std::function<std::string()>& non_finite) {
  Stopwatch time(validate_seconds_);
  try {
    CheckpointTarget target;
    if (!target_or_ignore(name, target)) return;
    target.parameter->check_declared(*target.sub_shard, shape, dtype, Device::cpu());
    // A scale's value is checked now (it is one number), so a bad one fails the staging.
    if (target.parameter->positive_scale() || (options_.check_finite && !non_finite)) {
      target.parameter->check_loadable(*target.sub_shard, produce(), options_.check_finite);
    } else if (options_.check_finite) {
      // The whole source tensor (not only this rank's rows): every rank refuses alike.
      if (const std::string problem = non_finite(); !problem.empty())
        refuse_non_finite(fmt::format("'{}': {}", name, problem));
    }
    Staged staged{target, Tensor(), std::move(produce), Tensor(), QuantMethod::none};
    staged.shape = shape;
    staged.dtype = dtype;
    stage(name, std::move(staged));
  } catch (const Error& e) {
    if (failure_.empty()) failure_ = e.what();
    throw;
  }
}

void WeightUpdate::update_codes(const std::string& name, const Tensor& codes, const Tensor& scales,
                                QuantMethod stored) {
  Stopwatch time(validate_seconds_);
  try {
    CheckpointTarget target;
    if (!target_or_ignore(name, target)) return;
    target.parameter->check_codes_loadable(*target.sub_shard, codes, scales, stored,
                                           options_.check_finite);
    stage(name, {target, codes, nullptr, scales, stored});
  } catch (const Error& e) {
    if (failure_.empty()) failure_ = e.what();
    throw;
  }
}

void WeightUpdate::update_block_codes(const std::string& name, BlockCodes codes,
                                      const std::function<std::string()>& non_finite) {
  Stopwatch time(validate_seconds_);
  try {
    CheckpointTarget target;
    if (!target_or_ignore(name, target)) return;
    if (const std::string why =
            target.parameter->block_codes_unsupported_reason(*target.sub_shard, codes);
        !why.empty())
      fail("'{}': cannot store its codes as they are: {}", name, why);
    // The whole source tensor's scales (not only this rank's rows): every rank refuses alike.
    if (options_.check_finite)
      if (const std::string problem = non_finite ? non_finite() : block_codes_non_finite(codes);
          !problem.empty())
        refuse_non_finite(fmt::format("'{}': {}", name, problem));
    Staged staged{target, Tensor(), nullptr, Tensor(), QuantMethod::none};
    staged.shape = codes.shape;
    staged.dtype = DType::f32;
    staged.block_codes = std::move(codes);
    stage(name, std::move(staged));
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

UpdateReport WeightUpdate::summary() const {
  UpdateReport r;
  std::set<const Parameter*> parameters;
  for (const Staged& s : pending_) {
    r.tensors.push_back(s.target.sub_shard->checkpoint_name);
    parameters.insert(s.target.parameter);
    if (s.tensor.defined())
      r.bytes += s.tensor.nbytes() + (s.scales.defined() ? s.scales.nbytes() : 0);
    else {
      int64_t n = 1;
      for (int64_t d : s.shape) n *= d;
      r.bytes += dtype_nbytes(s.dtype, n);
    }
  }
  r.parameters = parameters.size();
  r.ignored = ignored_;
  r.checked_finite = options_.check_finite;
  r.validate_seconds = validate_seconds_;
  return r;
}

UpdateReport WeightUpdate::report() const { return finished_ ? written_ : summary(); }

void WeightUpdate::apply() {
  if (finished_) fail("weight update: the transaction has already been committed or aborted");
  if (failed())
    fail("weight update: refusing to commit after a refused tensor ({}); abort it", failure_);
  if (!half_staged_.empty()) {
    const CheckpointAlias& alone = *half_staged_.begin()->second.first;
    failure_ = fmt::format("'{}' was sent without '{}' (MXFP4 blocks and scales come together)",
                           alone.name, alone.partner);
    fail("weight update: refusing to commit: {}; abort it", failure_);
  }
  written_ = summary();
  double seconds = 0.0;
  {
    Stopwatch time(seconds);
    for (Staged& s : pending_) {
      if (s.scales.defined()) {
        s.target.parameter->load_codes(*s.target.sub_shard, s.tensor, s.scales, s.stored);
        s = Staged{};
        continue;
      }
      if (s.block_codes) {
        s.target.parameter->load_block_codes(*s.target.sub_shard, s.block_codes);
        s = Staged{};
        continue;
      }
      Tensor tensor = s.tensor.defined() ? s.tensor : s.produce();
      s.target.parameter->load(*s.target.sub_shard, tensor);
      s = Staged{};  // release a produced tensor before making the next one
    }
  }
  written_.commit_seconds = seconds;
  pending_.clear();
  owners_.clear();
  finished_ = true;
}

}  // namespace refit
