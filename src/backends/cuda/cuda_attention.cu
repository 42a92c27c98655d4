// Causal grouped-query attention over a KV cache on the GPU (ops::attention).
//
// One block per (new token, query head), kWarps warps. Each warp walks every kWarps-th
// cache row the token may see, computes the score with a warp reduction and keeps an
// online softmax (running max m, running sum l, running weighted sum of value rows in
// registers, head_dim / 32 values per lane). The warps' partial results are merged in
// shared memory at the end. No score buffer, so any context length fits; head_dim is
// limited to kAttentionMaxHeadDim by the registers each lane keeps. A head's sink (gpt-oss)
// joins the merge as one more term of the denominator with no value row.
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_launch.h"
#include "backends/cuda/cuda_reduce.cuh"

namespace refit::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kPerLane = static_cast<int>(kAttentionMaxHeadDim / 32);

__global__ void attention_kernel(AttentionArgs a) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t hd = a.head_dim;
  const int64_t kvh = h / (a.H / a.KVH);
  const float* q = a.q + t * a.q_t + h * a.q_h;
  const float* k = a.k + kvh * a.k_h;
  const float* v = a.v + kvh * a.v_h;

  float qreg[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    qreg[i] = d < hd ? q[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  // Causal: cache rows up to start_pos + t; with a window only the last `window` of them.
  const int64_t pos = a.start_pos + t;
  const int64_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
  for (int64_t s = lo + warp; s <= pos; s += kWarps) {
    const float* kr = k + s * a.k_t;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < hd) dot += qreg[i] * kr[d];
    }
    const float score = warp_sum(dot) * a.scale;
    const float m_new = fmaxf(m, score);
    const float correction = expf(m - m_new);  // 0 on the first row (m = -inf)
    const float p = expf(score - m_new);
    l = l * correction + p;
    const float* vr = v + s * a.v_t;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < hd) acc[i] = acc[i] * correction + p * vr[d];
    }
    m = m_new;
  }

  __shared__ float warp_m[kWarps], warp_l[kWarps];
  __shared__ float warp_acc[kWarps][kAttentionMaxHeadDim];
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < hd) warp_acc[warp][d] = acc[i];
  }
  __syncthreads();
  // Rescale each warp's partial sums to the common max; a warp that saw no row (l = 0,
  // when the token sees fewer than kWarps rows) contributes nothing.
  float m_all = -INFINITY;
  for (int w = 0; w < kWarps; ++w)
    if (warp_l[w] > 0.0f) m_all = fmaxf(m_all, warp_m[w]);
  const float sink = a.sinks ? a.sinks[h * a.sink_h] : -INFINITY;
  m_all = fmaxf(m_all, sink);
  float scale_w[kWarps];
  float l_all = a.sinks ? expf(sink - m_all) : 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    scale_w[w] = warp_l[w] > 0.0f ? expf(warp_m[w] - m_all) : 0.0f;
    l_all += warp_l[w] * scale_w[w];
  }
  const float inv = 1.0f / l_all;
  float* out = a.out + t * a.o_t + h * a.o_h;
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += warp_acc[w][d] * scale_w[w];
    out[d] = o * inv;
  }
}

}  // namespace

cudaError_t launch_attention(const AttentionArgs& args) {
  if (args.T == 0 || args.H == 0 || args.head_dim == 0) return cudaSuccess;
  // The wrapper checks T < 2^31, H <= 65535 and head_dim <= kAttentionMaxHeadDim.
  const dim3 grid(static_cast<unsigned>(args.T), static_cast<unsigned>(args.H));
  attention_kernel<<<grid, kWarps * 32>>>(args);
  return cudaGetLastError();
}

}  // namespace refit::cuda
