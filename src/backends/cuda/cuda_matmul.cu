// Matmul helpers cuBLAS does not provide: the bias pre-fill for sgemm (beta = 1), and a
// GEMM with f32 activations and f16/bf16 weights.
//
// cuBLAS's mixed-precision GEMMs want both inputs in the same 16-bit type, which would
// round the activations; the CPU kernel keeps them f32 and converts the weights exactly.
// This kernel does the same: one warp per output column n computes kRows rows of x at a
// time (each weight row is read once per kRows rows), lanes stride along K so reads are
// coalesced, and a warp reduction finishes each dot product. Fast for decode (M small),
// adequate for prefill; a tiled tensor-core kernel is future work (docs/cuda.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_launch.h"
#include "backends/cuda/cuda_reduce.cuh"

namespace refit::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;  // output columns per block
constexpr int kRows = 4;           // rows of x per warp pass
constexpr int64_t kMaxGridY = 65535;

__device__ inline float to_f32(__half v) { return __half2float(v); }
__device__ inline float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

__global__ void fill_rows_kernel(float* out, int64_t ldo, const float* bias, int64_t M, int64_t N) {
  for (int64_t m = blockIdx.y; m < M; m += gridDim.y)
    for (int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; n < N;
         n += int64_t{gridDim.x} * blockDim.x)
      out[m * ldo + n] = bias ? bias[n] : 0.0f;
}

template <typename W>
__global__ void matmul_half_kernel(const float* x, int64_t ldx, const W* w, int64_t ldw,
                                   const float* bias, float* out, int64_t ldo, int64_t M, int64_t N,
                                   int64_t K) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = blockIdx.x * int64_t{kWarpsPerBlock} + warp;
  if (n >= N) return;  // whole warp leaves together; no block-wide sync below
  const W* wr = w + n * ldw;
  const float b = bias ? bias[n] : 0.0f;
  for (int64_t m0 = blockIdx.y * int64_t{kRows}; m0 < M; m0 += int64_t{gridDim.y} * kRows) {
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    for (int64_t k = lane; k < K; k += 32) {
      const float wv = to_f32(wr[k]);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (m0 + r < M) acc[r] += x[(m0 + r) * ldx + k] * wv;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float sum = warp_sum(acc[r]);
      if (lane == 0 && m0 + r < M) out[(m0 + r) * ldo + n] = sum + b;
    }
  }
}

}  // namespace

cudaError_t launch_fill_rows(float* out, int64_t ldo, const float* bias, int64_t M, int64_t N) {
  if (M == 0 || N == 0) return cudaSuccess;
  const int64_t x_blocks = (N + 255) / 256;
  const dim3 grid(static_cast<unsigned>(x_blocks > 65535 ? 65535 : x_blocks),
                  static_cast<unsigned>(M > kMaxGridY ? kMaxGridY : M));
  fill_rows_kernel<<<grid, 256>>>(out, ldo, bias, M, N);
  return cudaGetLastError();
}

cudaError_t launch_matmul_half(const float* x, int64_t ldx, const void* w, int64_t ldw,
                               HalfType w_type, const float* bias, float* out, int64_t ldo,
                               int64_t M, int64_t N, int64_t K) {
  if (M == 0 || N == 0) return cudaSuccess;
  const int64_t col_blocks = (N + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t row_blocks = (M + kRows - 1) / kRows;
  // The wrapper checks N fits the grid's x dimension (2^31 - 1 blocks).
  const dim3 grid(static_cast<unsigned>(col_blocks),
                  static_cast<unsigned>(row_blocks > kMaxGridY ? kMaxGridY : row_blocks));
  if (w_type == HalfType::f16)
    matmul_half_kernel<<<grid, kWarpsPerBlock * 32>>>(x, ldx, static_cast<const __half*>(w), ldw,
                                                      bias, out, ldo, M, N, K);
  else
    matmul_half_kernel<<<grid, kWarpsPerBlock * 32>>>(x, ldx, static_cast<const __nv_bfloat16*>(w),
                                                      ldw, bias, out, ldo, M, N, K);
  return cudaGetLastError();
}

}  // namespace refit::cuda
