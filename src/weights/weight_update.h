// A weight update (refit) as a transaction: begin -> update(name, tensor)* -> commit, or
// abort. update() validates each incoming tensor at once (known checkpoint name, its
// full logical shape, a float dtype the parameter converts from, the cpu, and finite
// values unless check_finite is off) and keeps a reference to it: nothing is copied or
// written. A refused tensor marks the transaction failed, and a failed transaction cannot
// commit, so a bad update leaves every byte and the weight version as they were. apply()
// (run by Engine::commit under the weights' write lock) writes each tensor into its
// parameter's existing storage through Parameter::load, one at a time, so the extra
// memory is one parameter's staging buffer. report() says what was written.
#pragma once

#include <any>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "weights/block_codes.h"
#include "weights/parameter_set.h"
#include "weights/update_report.h"

namespace refit {

struct UpdateOptions {
  // Refuse NaN and infinite values (one read pass over the update: a diverged trainer's
  // weights would otherwise be served). On by default.
  bool check_finite = true;
  // A tensor no parameter takes: refused (false), or left out and listed in the report.
  bool ignore_unknown_tensors = false;

  // For the tensor-parallel command wire.
  uint64_t bits() const;
  static UpdateOptions from_bits(uint64_t bits);
};

class WeightUpdate {
 public:
  WeightUpdate(const ParameterSet& params, UpdateOptions options)
      : params_(params), options_(options) {}

  // Validates and stages a reference. Throws Error naming the tensor and the problem;
  // the transaction is then failed. A name no parameter takes is refused, or with
  // ignore_unknown_tensors left out and listed in the report. A stacked form
  // (ParameterSet::alias: HF gpt-oss's `mlp.experts.gate_up_proj`) is staged as the
  // per-expert tensors it holds, each a view; MXFP4 `_blocks` and `_scales` are decoded at
  // commit, and must both come before it.
  void update(const std::string& checkpoint_name, const Tensor& tensor);
  // A tensor made only when the commit writes it (dequantized or re-ordered from a
  // file), declared by shape and dtype so it is validated now; memory then stays bounded
  // by one parameter however large the update. check_finite asks `non_finite` (a
  // description of the first non-finite value, "" for none, read from the source without
  // making the tensor) or, without one, makes the tensor once now to scan it.
  void update_lazy(const std::string& checkpoint_name, const Shape& shape, DType dtype,
                   std::function<Tensor()> produce,
                   const std::function<std::string()>& non_finite = {});
  // FP8 codes and scales a pre-quantized checkpoint holds, stored as they are
  // (Parameter::load_codes; validated now, written at commit). Used by a refit from disk
  // whose checkpoint is in the parameter's own FP8 scheme: bitwise a fresh load of it.
  void update_codes(const std::string& checkpoint_name, const Tensor& codes, const Tensor& scales,
                    QuantMethod stored);
  // Q8_0 / MXFP4 blocks a checkpoint holds (weights/block_codes.h), stored as they are
  // (Parameter::load_block_codes; written at commit), as a fresh load of that checkpoint
  // stores them. The parameter must take them (block_codes_unsupported_reason ""); the caller
  // otherwise stages the decoded values. `non_finite` as for update_lazy.
  void update_block_codes(const std::string& checkpoint_name, BlockCodes codes,
                          const std::function<std::string()>& non_finite = {});
  // Keeps something (an open checkpoint whose mapped tensors are staged) alive until
  // the transaction ends.
  void keep_alive(std::any owner) { owners_.push_back(std::move(owner)); }
  // Tensors of the update's source that no parameter takes, left out (for the report).
  void add_ignored(const std::vector<std::string>& names);
  const UpdateOptions& options() const { return options_; }
  // What was staged (before the commit) or written (after it).
  UpdateReport report() const;

  size_t size() const { return pending_.size(); }
  // The sub-shards (checkpoint tensors) this transaction writes.
  std::vector<const SubShard*> staged_sub_shards() const;
  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }
  bool finished() const { return finished_; }
  void abort();
  // Writes every staged tensor. Refuses a failed or finished transaction.
  void apply();

 private:
  const ParameterSet& params_;
  UpdateOptions options_;
  struct Staged {
    CheckpointTarget target;
    Tensor tensor;                    // or, when undefined:
    std::function<Tensor()> produce;  // made at commit
    Tensor scales;                    // defined: `tensor` holds FP8 codes (update_codes)
    QuantMethod stored = QuantMethod::none;
    Shape shape = {};  // of a produced tensor, as declared (for the report)
    DType dtype = DType::f32;
    BlockCodes block_codes =
        {};  // set: Q8_0 / MXFP4 blocks (update_block_codes), stored as they are
  };
  void stage(const std::string& name, Staged staged);
  // A stacked tensor (ParameterSet::alias) staged as its parts; MXFP4 blocks or scales wait
  // in half_staged_ for their partner, and a commit with one still waiting is refused.
  void stage_stacked(const CheckpointAlias& alias, const Tensor& tensor);
  std::unordered_map<std::string, std::pair<const CheckpointAlias*, Tensor>> half_staged_;
  // The parameter taking `name`, or nullptr when ignore_unknown_tensors sets it aside.
  const Parameter* target_or_ignore(const std::string& name, CheckpointTarget& target);
  UpdateReport summary() const;
  std::vector<Staged> pending_;
  std::vector<std::string> ignored_;
  double validate_seconds_ = 0.0;
  UpdateReport written_;  // set by apply()
  std::vector<std::any> owners_;
  std::string failure_;
  bool finished_ = false;
};

}  // namespace refit
