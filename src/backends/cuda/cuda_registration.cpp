// Installs the CUDA backend while the program starts: its DeviceAllocator for
// DeviceType::cuda (core/storage.h) and its rows of the dispatch table (kernels/registry.h).
// Core and the kernel registry never name a backend; the backend names them. This file is
// linked whole into every program of a REFIT_CUDA build (CMakeLists.txt), because nothing
// refers to it by name and a static library would drop it. Registering needs no GPU: the
// device count is probed on first use, so a machine without one still runs its CPU work.
#include "backends/cuda/cuda_backend.h"
#include "core/storage.h"
#include "kernels/registry.h"

namespace refit::cuda {
namespace {

struct Registration {
  Registration() {
    register_device_allocator(DeviceType::cuda, &device_allocator());
    register_backend_kernels(&register_cuda_kernels);
  }
};
const Registration registration;

}  // namespace
}  // namespace refit::cuda
