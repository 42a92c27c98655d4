#include "dist/local_group.h"

#include <cstring>

#include "core/error.h"

namespace refit {

class LocalGroupCommunicator final : public Communicator {
 public:
  LocalGroupCommunicator(std::shared_ptr<LocalGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_; }
  std::string name() const override { return "local-threads"; }

  void all_reduce_sum(float* data, size_t count) override {
    LocalGroup& g = *group_;
    g.outputs_[rank_] = data;
    g.barrier_.arrive_and_wait();
    // Each rank sums every rank's buffer in rank order into a private copy...
    std::vector<float> sum(count, 0.0f);
    for (int r = 0; r < g.world_; ++r)
      for (size_t i = 0; i < count; ++i) sum[i] += g.outputs_[r][i];
    g.barrier_.arrive_and_wait();  // ...and only writes once everyone has read.
    std::memcpy(data, sum.data(), count * sizeof(float));
    g.barrier_.arrive_and_wait();
  }
  void all_gather(const float* in, size_t count, float* out) override {
    LocalGroup& g = *group_;
    g.inputs_[rank_] = in;
    g.barrier_.arrive_and_wait();
    for (int r = 0; r < g.world_; ++r)
      std::memcpy(out + r * count, g.inputs_[r], count * sizeof(float));
    g.barrier_.arrive_and_wait();
  }
  void broadcast(void* data, size_t bytes, int root) override {
    LocalGroup& g = *group_;
    g.broadcast_[rank_] = data;
    g.barrier_.arrive_and_wait();
    if (rank_ != root) std::memcpy(data, g.broadcast_[root], bytes);
    g.barrier_.arrive_and_wait();
  }
  void barrier() override { group_->barrier_.arrive_and_wait(); }

 private:
  std::shared_ptr<LocalGroup> group_;
  int rank_;
};

LocalGroup::LocalGroup(int world_size)
    : world_(world_size),
      barrier_(world_size),
      inputs_(world_size),
      outputs_(world_size),
      broadcast_(world_size) {
  if (world_size < 1) fail("LocalGroup: world size must be >= 1, got {}", world_size);
}

std::shared_ptr<Communicator> LocalGroup::communicator(int rank) {
  if (rank < 0 || rank >= world_)
    fail("LocalGroup: rank {} out of range for {} ranks", rank, world_);
  // The communicator shares ownership of the group (aliasing: the group must be held
  // by a shared_ptr, which make_local_group ensures).
  return std::make_shared<LocalGroupCommunicator>(self_.lock(), rank);
}

}  // namespace refit
