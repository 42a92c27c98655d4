// Launchers for the CUDA kernels in *.cu, on raw device pointers. The .cu files include
// only this header and CUDA's, so nvcc never compiles refit's C++20 headers; the tensor
// wrappers in cuda_kernels.cpp read shapes and strides and call these.
//
// Every launcher runs on the current device and the legacy default stream, and returns
// cudaGetLastError() after the launch (the kernel itself runs asynchronously).
// Strides ("ld*") count elements. Shapes are those of kernels/ops.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace refit::cuda {

// Weight element types of the f16/bf16 matmul and the embedding table.
enum class HalfType : int { f16 = 1, bf16 = 2 };

// out[m, :] = bias (or 0) for every row, before cuBLAS accumulates into it (beta = 1).
cudaError_t launch_fill_rows(float* out, int64_t ldo, const float* bias, int64_t M, int64_t N);

// out[M, N] = x[M, K] · w[N, K]^T (+ bias[N]) with f16/bf16 weights converted exactly to
// f32 and f32 accumulation (the CPU kernel's arithmetic; cuBLAS has no f32 x f16 GEMM).
cudaError_t launch_matmul_half(const float* x, int64_t ldx, const void* w, int64_t ldw,
                               HalfType w_type, const float* bias, float* out, int64_t ldo,
                               int64_t M, int64_t N, int64_t K);

// One row per block: out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * (w + offset);
// offset 0 multiplies by w as stored.
cudaError_t launch_rms_norm(const float* x, int64_t ldx, const float* w, int64_t T, int64_t D,
                            float eps, float offset, float* out, int64_t ldo);

// In-place softmax of `rows` contiguous rows of length D.
cudaError_t launch_softmax(float* x, int64_t rows, int64_t D);

// out[i] = silu(gate[i]) * up[i], n contiguous elements.
cudaError_t launch_silu_mul(const float* gate, const float* up, float* out, int64_t n);

// out[i] = gelu_tanh(gate[i]) * up[i], n contiguous elements.
cudaError_t launch_gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n);

// out[i] = x[i] * s, n contiguous elements (out may alias x).
cudaError_t launch_scale(const float* x, float s, float* out, int64_t n);

// out[i] = a[i] + b[i], n contiguous elements (out may alias a or b).
cudaError_t launch_add(const float* a, const float* b, float* out, int64_t n);

// out[t, :] = f32(table[ids[t * ids_stride], :]); table rows ld_table elements apart.
// table_type 0 = f32, else f16/bf16. Ids must already be range-checked.
cudaError_t launch_embedding(const void* table, int table_type, int64_t ld_table,
                             const int32_t* ids, int64_t ids_stride, int64_t T, int64_t D,
                             float* out, int64_t ldo);

// In place on x[T, H, head_dim] (token stride ldt, head stride ldh), rotating the first
// rot dims by row positions[t * pos_stride] of cos_sin (row stride ldcs).
// Positions must already be range-checked.
cudaError_t launch_rope(float* x, int64_t ldt, int64_t ldh, int64_t T, int64_t H,
                        const int32_t* positions, int64_t pos_stride, const float* cos_sin,
                        int64_t ldcs, int64_t rot, bool neox);

// Causal GQA attention (kernels/ops.h); strides per [token, head]; head_dim <= 256;
// window 0 unlimited, else the last `window` positions; sinks: [H] (stride sink_h) or
// nullptr, one logit per head joining the softmax denominator.
constexpr int64_t kAttentionMaxHeadDim = 256;
struct AttentionArgs {
  const float* q;
  int64_t q_t, q_h;
  const float* k;
  int64_t k_t, k_h;
  const float* v;
  int64_t v_t, v_h;
  float* out;
  int64_t o_t, o_h;
  int64_t T, H, KVH, head_dim, start_pos, window;
  float scale;
  const float* sinks;
  int64_t sink_h;
};
cudaError_t launch_attention(const AttentionArgs& args);

}  // namespace refit::cuda
