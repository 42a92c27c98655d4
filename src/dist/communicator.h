// Collective communication between tensor-parallel ranks. The single-process
// communicator is the identity; the MPI one (src/dist/mpi/, built when OpenMPI is found)
// runs one rank per process under mpirun. NCCL would slot in here for GPUs.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace refit {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string name() const = 0;
  // In place: every rank ends with the element-wise sum over ranks.
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  // `in` holds `count` floats per rank; `out` receives world_size * count, rank-major.
  virtual void all_gather(const float* in, size_t count, float* out) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
};

std::shared_ptr<Communicator> single_process_communicator();
// The MPI communicator over MPI_COMM_WORLD (initialising MPI on first use), or null when
// this build has no MPI or the process was not started by mpirun with more than one rank.
std::shared_ptr<Communicator> mpi_communicator_if_launched();
bool built_with_mpi();

}  // namespace refit
