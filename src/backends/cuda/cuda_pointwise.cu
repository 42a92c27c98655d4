// Row-wise and element-wise CUDA kernels: rms_norm, softmax, silu_mul, gelu_tanh_mul,
// scale, add, embedding, rope. Each mirrors the arithmetic of its CPU kernel
// (kernels/cpu/pointwise_cpu.cpp); only the order of the f32 sums in a reduction differs. Simple,
// memory-bound kernels: one block per row for reductions, grid-stride loops for element-wise work.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "backends/cuda/cuda_launch.h"
#include "backends/cuda/cuda_reduce.cuh"

namespace refit::cuda {
namespace {

constexpr int kRowThreads = 256;  // reductions: a multiple of 32
constexpr int kElementThreads = 256;
constexpr int64_t kMaxBlocks = 65535;  // grid-stride loops cover the rest

int element_blocks(int64_t n) {
  const int64_t blocks = (n + kElementThreads - 1) / kElementThreads;
  return static_cast<int>(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

// Rows go to blockIdx.x with a grid-stride loop, so any row count launches.
int row_blocks(int64_t rows) {
  const int64_t limit = 2147483647;
  return static_cast<int>(rows < 1 ? 1 : rows > limit ? limit : rows);
}

__global__ void rms_norm_kernel(const float* x, int64_t ldx, const float* w, int64_t T, int64_t D,
                                float eps, float offset, float* out, int64_t ldo) {
  __shared__ float scratch[32];
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const float* xr = x + t * ldx;
    float* orow = out + t * ldo;
    float ss = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) ss += xr[d] * xr[d];
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    if (offset == 0.0f) {
      for (int64_t d = threadIdx.x; d < D; d += blockDim.x) orow[d] = xr[d] * inv * w[d];
    } else {
      for (int64_t d = threadIdx.x; d < D; d += blockDim.x) orow[d] = xr[d] * inv * (w[d] + offset);
    }
  }
}

__global__ void softmax_kernel(float* x, int64_t rows, int64_t D) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* xr = x + r * D;
    float mx = -INFINITY;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) mx = fmaxf(mx, xr[d]);
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      // exp(-inf) must be 0 (masked entries), as on the CPU.
      const float e = expf(fmaxf(xr[d] - mx, -FLT_MAX));
      xr[d] = e;
      sum += e;
    }
    sum = block_sum(sum, scratch);
    const float inv = 1.0f / sum;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) xr[d] *= inv;
  }
}

__global__ void silu_mul_kernel(const float* g, const float* u, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float gv = g[i];
    // Clamp as the CPU kernel does: exp(88) already makes silu(g) ~ -1e-37 * |g|.
    out[i] = gv / (1.0f + expf(fminf(-gv, 88.0f))) * u[i];
  }
}

__global__ void gelu_tanh_mul_kernel(const float* g, const float* u, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float gv = g[i];
    // The CPU kernel's formula and clamp (tanh(+-9) is +-1 in f32).
    const float inner =
        fminf(fmaxf(0.7978845608028654f * (gv + 0.044715f * gv * gv * gv), -9.0f), 9.0f);
    out[i] = 0.5f * gv * (1.0f + tanhf(inner)) * u[i];
  }
}

__global__ void scale_kernel(const float* x, float s, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = x[i] * s;
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void embedding_kernel(const void* table, int table_type, int64_t ld_table,
                                 const int32_t* ids, int64_t ids_stride, int64_t T, int64_t D,
                                 float* out, int64_t ldo) {
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const int64_t row = int64_t{ids[t * ids_stride]} * ld_table;
    float* orow = out + t * ldo;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float v;
      if (table_type == 0)
        v = static_cast<const float*>(table)[row + d];
      else if (table_type == static_cast<int>(HalfType::f16))
        v = __half2float(static_cast<const __half*>(table)[row + d]);
      else
        v = __bfloat162float(static_cast<const __nv_bfloat16*>(table)[row + d]);
      orow[d] = v;
    }
  }
}

// One block per token; threads walk (head, pair) items. A pair is (i, i + rot/2) for
// neox and (2i, 2i + 1) for interleaved; both rotate by the angle of frequency i.
__global__ void rope_kernel(float* x, int64_t ldt, int64_t ldh, int64_t T, int64_t H,
                            const int32_t* positions, int64_t pos_stride, const float* cos_sin,
                            int64_t ldcs, int64_t rot, bool neox) {
  const int64_t half = rot / 2;
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const float* cs = cos_sin + int64_t{positions[t * pos_stride]} * ldcs;
    for (int64_t item = threadIdx.x; item < H * half; item += blockDim.x) {
      const int64_t h = item / half, i = item % half;
      float* v = x + t * ldt + h * ldh;
      const int64_t a = neox ? i : 2 * i;
      const int64_t b = neox ? i + half : 2 * i + 1;
      const float c = cs[i], s = cs[half + i];
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

}  // namespace

cudaError_t launch_rms_norm(const float* x, int64_t ldx, const float* w, int64_t T, int64_t D,
                            float eps, float offset, float* out, int64_t ldo) {
  if (T == 0) return cudaSuccess;
  rms_norm_kernel<<<row_blocks(T), kRowThreads>>>(x, ldx, w, T, D, eps, offset, out, ldo);
  return cudaGetLastError();
}

cudaError_t launch_softmax(float* x, int64_t rows, int64_t D) {
  if (rows == 0 || D == 0) return cudaSuccess;
  softmax_kernel<<<row_blocks(rows), kRowThreads>>>(x, rows, D);
  return cudaGetLastError();
}

cudaError_t launch_silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  if (n == 0) return cudaSuccess;
  silu_mul_kernel<<<element_blocks(n), kElementThreads>>>(gate, up, out, n);
  return cudaGetLastError();
}

cudaError_t launch_gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  if (n == 0) return cudaSuccess;
  gelu_tanh_mul_kernel<<<element_blocks(n), kElementThreads>>>(gate, up, out, n);
  return cudaGetLastError();
}

cudaError_t launch_scale(const float* x, float s, float* out, int64_t n) {
  if (n == 0) return cudaSuccess;
  scale_kernel<<<element_blocks(n), kElementThreads>>>(x, s, out, n);
  return cudaGetLastError();
}

cudaError_t launch_add(const float* a, const float* b, float* out, int64_t n) {
  if (n == 0) return cudaSuccess;
  add_kernel<<<element_blocks(n), kElementThreads>>>(a, b, out, n);
  return cudaGetLastError();
}

cudaError_t launch_embedding(const void* table, int table_type, int64_t ld_table,
                             const int32_t* ids, int64_t ids_stride, int64_t T, int64_t D,
                             float* out, int64_t ldo) {
  if (T == 0 || D == 0) return cudaSuccess;
  embedding_kernel<<<row_blocks(T), kRowThreads>>>(table, table_type, ld_table, ids, ids_stride, T,
                                                   D, out, ldo);
  return cudaGetLastError();
}

cudaError_t launch_rope(float* x, int64_t ldt, int64_t ldh, int64_t T, int64_t H,
                        const int32_t* positions, int64_t pos_stride, const float* cos_sin,
                        int64_t ldcs, int64_t rot, bool neox) {
  if (T == 0 || H == 0 || rot == 0) return cudaSuccess;
  rope_kernel<<<row_blocks(T), kRowThreads>>>(x, ldt, ldh, T, H, positions, pos_stride, cos_sin,
                                              ldcs, rot, neox);
  return cudaGetLastError();
}

}  // namespace refit::cuda
