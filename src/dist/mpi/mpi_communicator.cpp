// MPI_COMM_WORLD as a Communicator: the collectives are MPI's own (MPI_Allreduce,
// MPI_Allgather, MPI_Bcast), not hand-written sockets.
#include <mpi.h>

#include <cstdlib>

#include "core/error.h"
#include "dist/communicator.h"

namespace refit {
namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char message[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, message, &len);
    fail("MPI {} failed: {}", what, std::string(message, len));
  }
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
      std::atexit([] {
        int finalised = 0;
        MPI_Finalized(&finalised);
        if (!finalised) MPI_Finalize();
      });
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  void all_reduce_sum(float* data, size_t count) override {
    check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD),
          "all-reduce");
  }
  void all_gather(const float* in, size_t count, float* out) override {
    check(MPI_Allgather(in, static_cast<int>(count), MPI_FLOAT, out, static_cast<int>(count),
                        MPI_FLOAT, MPI_COMM_WORLD),
          "all-gather");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool built_with_mpi() { return true; }

std::shared_ptr<Communicator> mpi_communicator_if_launched() {
  // mpirun (OpenMPI) sets these; without them, stay single-process and never init MPI.
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!size) size = std::getenv("PMI_SIZE");
  if (!size || std::atoi(size) <= 1) return nullptr;
  static auto communicator = std::make_shared<MpiCommunicator>();
  return communicator;
}

}  // namespace refit
