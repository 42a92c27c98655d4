#include "dist/communicator.h"

#include <cstring>

namespace refit {
namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string name() const override { return "single-process"; }
  void all_reduce_sum(float*, size_t) override {}
  void all_gather(const float* in, size_t count, float* out) override {
    if (in != out) std::memmove(out, in, count * sizeof(float));
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
};

}  // namespace

std::shared_ptr<Communicator> single_process_communicator() {
  static auto c = std::make_shared<SingleProcess>();
  return c;
}

#ifndef REFIT_HAVE_MPI
std::shared_ptr<Communicator> mpi_communicator_if_launched() { return nullptr; }
bool built_with_mpi() { return false; }
#endif

}  // namespace refit
