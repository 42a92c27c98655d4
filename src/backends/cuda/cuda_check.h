// Host-side helpers shared by the CUDA backend's .cpp files: turn CUDA and cuBLAS status
// codes into refit::Error with what was being done, switch the current device for the
// length of a call, and find this thread's cuBLAS handle for a device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace refit::cuda {

// Throws refit::Error("cuda: <what>: <CUDA's error string>") unless status is success.
void check(cudaError_t status, const char* what);
void check(cublasStatus_t status, const char* what);

// Makes `index` the current device until the end of the scope (kernels launch on the
// current device; a tensor on cuda:1 must not run on cuda:0).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// This thread's cuBLAS handle for device `index` (created on first use, on the legacy
// default stream like every refit kernel, so work stays ordered without extra syncs).
// A handle must not be shared between host threads, hence one per thread.
cublasHandle_t cublas_handle(int index);

}  // namespace refit::cuda
