// Weight sync from a torch.distributed trainer, the part every engine rank runs: the
// groups this process has joined (by group_name, as SGLang keeps them) and receiving one
// /update_weights_from_distributed request's tensors from the trainer's broadcasts.
// The HTTP side is server/weight_sync_endpoints.h; tensor-parallel ranks run this through
// RankGroup commands; the transport is dist/torch_group/.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "dist/torch_group/torch_process_group.h"
#include "weights/weight_update.h"

namespace refit {

// torch's dtype names as trainers send them ("float32", "torch.bfloat16", "half") and
// refit's own ("f32", "bf16"). nullopt: not a dtype refit can hold.
std::optional<DType> dtype_from_torch_name(const std::string& name);

// What one update receives, in the trainer's broadcast order.
struct DistributedUpdate {
  std::string group_name;
  std::vector<std::string> names;
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  // SGLang's load_format "flattened_bucket": one broadcast of every tensor's bytes, in
  // order, back to back (FlattenedTensorBucket: each tensor flattened to uint8 and
  // concatenated); otherwise one broadcast per tensor.
  bool flattened_bucket = false;
  UpdateOptions options;  // how every rank validates what it receives

  std::string encode() const;                                   // for RankGroup commands
  static DistributedUpdate decode(const std::string& payload);  // bounds-checked
};

class WeightSyncGroups {
 public:
  // Joins (replacing a group of the same name: a trainer that restarted re-inits under
  // its old name without having destroyed it). Throws Error; nothing is kept on failure.
  // Returns a description of the joined group.
  std::string init(const TorchGroupOptions& options);
  // Receives every tensor of `update` (root 0). Throws Error naming what failed; a
  // failed broadcast leaves the group broken (destroy and init again).
  std::vector<std::pair<std::string, Tensor>> receive(const DistributedUpdate& update);
  // Throws Error when no such group.
  void destroy(const std::string& group_name);
  bool has(const std::string& group_name) const { return groups_.count(group_name) != 0; }

 private:
  TorchProcessGroup& group(const std::string& name);
  std::map<std::string, std::unique_ptr<TorchProcessGroup>> groups_;
};

}  // namespace refit
