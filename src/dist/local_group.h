// A tensor-parallel group of threads inside one process: rank r is the r-th thread
// that runs with communicator(r). Collectives meet at a barrier and combine through
// shared buffers. It lets tests run TP = 2 end to end without mpirun; the numbers are
// the same as MPI's for the sums here (ranks are added in rank order).
#pragma once

#include <barrier>
#include <memory>
#include <vector>

#include "dist/communicator.h"

namespace refit {

class LocalGroup {
 public:
  static std::shared_ptr<LocalGroup> create(int world_size) {
    std::shared_ptr<LocalGroup> g(new LocalGroup(world_size));
    g->self_ = g;
    return g;
  }
  std::shared_ptr<Communicator> communicator(int rank);
  int world_size() const { return world_; }

 private:
  friend class LocalGroupCommunicator;
  explicit LocalGroup(int world_size);
  std::weak_ptr<LocalGroup> self_;
  int world_;
  std::barrier<> barrier_;
  std::vector<const float*> inputs_;
  std::vector<float*> outputs_;
  std::vector<void*> broadcast_;
};

}  // namespace refit
