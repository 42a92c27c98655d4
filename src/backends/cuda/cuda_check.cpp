#include "backends/cuda/cuda_check.h"

#include <fmt/format.h>

#include <vector>

#include "core/error.h"

namespace refit::cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
  throw Error(
      fmt::format("cuda: {}: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status)));
}

void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(fmt::format("cuda: {}: cuBLAS {} ({})", what, cublasGetStatusString(status),
                          cublasGetStatusName(status)));
}

DeviceGuard::DeviceGuard(int index) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != index) check(cudaSetDevice(index), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

cublasHandle_t cublas_handle(int index) {
  // Never destroyed: at thread or process exit the CUDA context may already be gone, and
  // destroying a handle then fails or crashes; the driver reclaims it with the context.
  thread_local std::vector<cublasHandle_t> handles;
  if (index < 0) throw Error(fmt::format("cuda: invalid device index {}", index));
  if (static_cast<size_t>(index) >= handles.size()) handles.resize(index + 1, nullptr);
  if (!handles[index]) {
    DeviceGuard guard(index);
    cublasHandle_t handle = nullptr;
    check(cublasCreate(&handle), "cublasCreate");
    // Full f32 arithmetic (no TF32 tensor-core rounding), so cuda matmul results stay
    // within f32 rounding of the CPU kernels.
    check(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    handles[index] = handle;
  }
  return handles[index];
}

}  // namespace refit::cuda
