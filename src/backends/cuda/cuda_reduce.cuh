// Warp and block reductions shared by the CUDA kernels (device code only).
#pragma once

#include <cuda_runtime.h>

namespace refit::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// Every lane ends with the sum (xor butterfly).
__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Every thread of the block ends with the reduction of `v` over the block. `scratch`
// holds 32 floats of shared memory; it may be reused after the call returns. blockDim.x
// must be a multiple of 32 and every thread must call this (it synchronises the block).
template <bool kMax>
__device__ inline float block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const float identity = kMax ? -INFINITY : 0.0f;
    float w = lane < warps ? scratch[lane] : identity;
    w = kMax ? warp_max(w) : warp_sum(w);
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  const float result = scratch[0];
  __syncthreads();  // everyone has read scratch[0] before a later call overwrites it
  return result;
}

__device__ inline float block_sum(float v, float* scratch) { return block_reduce<false>(v, scratch); }
__device__ inline float block_max(float v, float* scratch) { return block_reduce<true>(v, scratch); }

}  // namespace refit::cuda
