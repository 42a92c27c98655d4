// The CUDA backend's entry points. This header is plain C++ (no CUDA headers), so tests
// can name the backend under #ifdef REFIT_HAVE_CUDA without compiling GPU code; core and
// the kernel registry never include it (cuda_registration.cpp installs both halves when
// the program starts). Built only with -DREFIT_CUDA=ON (docs/cuda.md).
#pragma once

#include "core/storage.h"

namespace refit {

class KernelRegistry;

// The CUDA rows of the dispatch table (matmul, rms_norm, rope, softmax, silu_mul,
// gelu_tanh_mul, scale, embedding, add, attention; paged_attention and the quantized ops
// are CPU-only), each declared for DeviceType::cuda so that dispatch
// (law L3) picks them only for tensors whose storage is on a GPU. Handed to
// register_backend_kernels() by cuda_registration.cpp.
void register_cuda_kernels(KernelRegistry& registry);

namespace cuda {

// cudaMalloc'd memory behind Storage::allocate(n, Device::cuda(i)) and the host<->device
// copies behind Tensor::copy_from / to(Device). Registered by cuda_registration.cpp.
DeviceAllocator& device_allocator();

// Devices the CUDA runtime can use now; 0 when there is no driver or no GPU.
int device_count();

}  // namespace cuda
}  // namespace refit
