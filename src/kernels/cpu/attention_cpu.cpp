// Causal grouped-query attention over a KV cache, in Highway SIMD.
//
// One work item is one (query head, new token) pair: scores over the cache rows it may
// see, a numerically stable softmax (subtract the max before exp), then the
// probability-weighted sum of value rows. Items are ordered head-major so the pool's
// contiguous chunks give each thread whole heads, which balances the causal triangle
// (every head has the same mix of short and long rows) and keeps a kv head's rows warm.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention_cpu.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace refit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// q: [hd]; k row s at k + s*ldk, v row s at v + s*ldv; len rows. scores: scratch [len].
// out: [hd].
void AttendOne(const float* HWY_RESTRICT q, const float* k, int64_t ldk, const float* v,
               int64_t ldv, int64_t len, int64_t hd, float scale, float* HWY_RESTRICT scores,
               float* HWY_RESTRICT out) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  float mx = -HUGE_VALF;
  for (int64_t s = 0; s < len; ++s) {
    const float* kr = k + s * ldk;
    VF acc = hn::Zero(df);
    int64_t d = 0;
    for (; d + L <= hd; d += L) acc = hn::MulAdd(hn::LoadU(df, q + d), hn::LoadU(df, kr + d), acc);
    float dot = hn::GetLane(hn::SumOfLanes(df, acc));
    for (; d < hd; ++d) dot += q[d] * kr[d];
    scores[s] = dot * scale;
    mx = std::max(mx, scores[s]);
  }
  const VF vmx = hn::Set(df, mx), lo = hn::Set(df, -FLT_MAX);
  VF vsum = hn::Zero(df);
  int64_t s = 0;
  for (; s + L <= len; s += L) {
    const VF e = hn::Exp(df, hn::Max(hn::Sub(hn::LoadU(df, scores + s), vmx), lo));
    hn::StoreU(e, df, scores + s);
    vsum = hn::Add(vsum, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, vsum));
  for (; s < len; ++s) sum += (scores[s] = std::exp(scores[s] - mx));

  int64_t d = 0;
  for (; d + L <= hd; d += L) hn::StoreU(hn::Zero(df), df, out + d);
  for (; d < hd; ++d) out[d] = 0.0f;
  for (s = 0; s < len; ++s) {
    const float* vr = v + s * ldv;
    const VF p = hn::Set(df, scores[s]);
    d = 0;
    for (; d + L <= hd; d += L)
      hn::StoreU(hn::MulAdd(p, hn::LoadU(df, vr + d), hn::LoadU(df, out + d)), df, out + d);
    for (; d < hd; ++d) out[d] += scores[s] * vr[d];
  }
  const VF inv = hn::Set(df, 1.0f / sum);
  d = 0;
  for (; d + L <= hd; d += L) hn::StoreU(hn::Mul(hn::LoadU(df, out + d), inv), df, out + d);
  for (; d < hd; ++d) out[d] *= 1.0f / sum;
}

}  // namespace refit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"

namespace refit::cpu {
HWY_EXPORT(AttendOne);

void attention_hwy(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                   int64_t start_pos, float scale, Tensor& out) {
  init_cpu_isa();
  const int64_t T = q.size(0), H = q.size(1), hd = q.size(2), KVH = k_cache.size(1);
  const int64_t group = H / KVH;  // ops::attention checks H % KVH == 0
  const float* qp = q.data<const float>();
  const float* kp = k_cache.data<const float>();
  const float* vp = v_cache.data<const float>();
  float* op = out.data<float>();
  const int64_t qt = q.stride(0), qh = q.stride(1);
  const int64_t kt = k_cache.stride(0), kh = k_cache.stride(1);
  const int64_t vt = v_cache.stride(0), vh = v_cache.stride(1);
  const int64_t ot = out.stride(0), oh = out.stride(1);
  // Enough work per chunk to pay for a wake-up: about (rows seen) x head_dim x 2 flops.
  const int64_t per_item = (start_pos + T) * hd;
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(per_item, 1));
  parallel_for(H * T, [&](int64_t i0, int64_t i1, int) {
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(start_pos + T));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t h = i / T, t = i % T, kvh = h / group;
      HWY_DYNAMIC_DISPATCH(AttendOne)(qp + t * qt + h * qh, kp + kvh * kh, kt, vp + kvh * vh, vt,
                                      start_pos + t + 1, hd, scale, scores.data(),
                                      op + t * ot + h * oh);
    }
  }, grain);
}

}  // namespace refit::cpu
#endif  // HWY_ONCE
