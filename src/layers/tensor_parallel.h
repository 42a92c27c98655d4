// Where this process sits in a tensor-parallel group; layers shard their parameters
// by it and call its communicator after row-parallel and vocab-parallel matmuls.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace refit {

struct TensorParallel {
  std::shared_ptr<Communicator> communicator = single_process_communicator();
  // Mixture-of-experts layers shard by expert (each rank whole experts) instead of along
  // each expert's width (vLLM's --enable-expert-parallel, refit's --ep).
  bool expert_parallel = false;
  int rank() const { return communicator->rank(); }
  int world() const { return communicator->world_size(); }
};

}  // namespace refit
