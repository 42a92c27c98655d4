// Device memory for Storage::allocate(n, Device::cuda(i)) and the copies behind
// Tensor::copy_from / to(Device): the DeviceAllocator (core/storage.h) of a CUDA build.
//
// The device count is probed once. A machine without a driver or a GPU reports 0 devices
// with the runtime's reason, and every allocation then fails with that reason instead of
// crashing, so a CUDA build runs its CPU work (and its tests skip) on such a machine.
#include <fmt/format.h>

#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "core/error.h"

namespace refit::cuda {
namespace {

struct Probe {
  int count = 0;
  std::string reason;  // why count is 0
};

const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    cudaError_t status = cudaGetDeviceCount(&p.count);
    if (status != cudaSuccess) {
      p.count = 0;
      p.reason = fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString(status),
                             cudaGetErrorName(status));
      cudaGetLastError();
    } else if (p.count == 0) {
      p.reason = "cudaGetDeviceCount found no device";
    }
    return p;
  }();
  return result;
}

class CudaAllocator final : public DeviceAllocator {
 public:
  std::string name() const override {
    int version = 0;
    cudaRuntimeGetVersion(&version);
    return fmt::format("cuda (CUDA runtime {}.{})", version / 1000, (version % 1000) / 10);
  }

  int device_count() const override { return probe().count; }
  std::string unavailable_reason() const override { return probe().reason; }

  void* allocate(size_t nbytes, int index) override {
    need_device(index, "allocate");
    DeviceGuard guard(index);
    void* p = nullptr;
    cudaError_t status = cudaMalloc(&p, nbytes);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw Error(fmt::format("cuda:{}: cudaMalloc of {} bytes failed: {}", index, nbytes,
                              cudaGetErrorString(status)));
    }
    return p;
  }

  void free(void* ptr, int index) noexcept override {
    // Errors are ignored: at process exit the runtime may be unloading already
    // (cudaErrorCudartUnloading), and a destructor must not throw.
    int previous = -1;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != index &&
                          cudaSetDevice(index) == cudaSuccess;
    cudaFree(ptr);
    if (switched) cudaSetDevice(previous);
    cudaGetLastError();
  }

  void memset(void* ptr, int value, size_t nbytes, int index) override {
    need_device(index, "memset");
    DeviceGuard guard(index);
    check(cudaMemset(ptr, value, nbytes), "cudaMemset");
  }

  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t nbytes) override {
    const bool dst_gpu = dst_device.type == DeviceType::cuda;
    const bool src_gpu = src_device.type == DeviceType::cuda;
    if ((!dst_gpu && dst_device.type != DeviceType::cpu) ||
        (!src_gpu && src_device.type != DeviceType::cpu) || (!dst_gpu && !src_gpu))
      throw Error(
          fmt::format("cuda: cannot copy from {} to {}", src_device.str(), dst_device.str()));
    if (dst_gpu) need_device(dst_device.index, "copy");
    if (src_gpu) need_device(src_device.index, "copy");
    if (nbytes == 0) return;
    if (dst_gpu && src_gpu && dst_device.index != src_device.index) {
      check(cudaMemcpyPeer(dst, dst_device.index, src, src_device.index, nbytes), "cudaMemcpyPeer");
      return;
    }
    // Host<->device copies from pageable memory return once the host buffer may be
    // reused; later work on the (legacy) default stream, where every refit kernel runs,
    // is ordered after them.
    DeviceGuard guard(dst_gpu ? dst_device.index : src_device.index);
    const cudaMemcpyKind kind = dst_gpu && src_gpu ? cudaMemcpyDeviceToDevice
                                : dst_gpu          ? cudaMemcpyHostToDevice
                                                   : cudaMemcpyDeviceToHost;
    check(cudaMemcpy(dst, src, nbytes, kind), "cudaMemcpy");
  }

 private:
  static void need_device(int index, const char* what) {
    const Probe& p = probe();
    if (index >= 0 && index < p.count) return;
    if (p.count == 0)
      throw Error(
          fmt::format("cuda:{}: cannot {}: no CUDA device is usable ({})", index, what, p.reason));
    throw Error(fmt::format("cuda:{}: cannot {}: device index out of range ({} CUDA device{})",
                            index, what, p.count, p.count == 1 ? "" : "s"));
  }
};

}  // namespace

DeviceAllocator& device_allocator() {
  // Never destroyed: storages freed during static destruction still need it.
  static CudaAllocator* allocator = new CudaAllocator();
  return *allocator;
}

int device_count() { return probe().count; }

}  // namespace refit::cuda
