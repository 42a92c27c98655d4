// One query row's attention over `len` cache rows, in Highway SIMD: scores, a numerically
// stable softmax (subtract the max before exp), then the probability-weighted sum of value
// rows. Shared by the contiguous-cache kernel (attention_cpu.cpp) and the paged one
// (paged_attention_cpu.cpp), which differ only in where cache row s lives: one body, so
// the two give the same output bit for bit (the server's batch invariance relies on it).
//
// Highway's per-target include pattern: included by each kernel file after
// hwy/foreach_target.h, compiled once per SIMD target.
#if defined(REFIT_KERNELS_CPU_ATTEND_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef REFIT_KERNELS_CPU_ATTEND_ROWS_INL_H_
#undef REFIT_KERNELS_CPU_ATTEND_ROWS_INL_H_
#else
#define REFIT_KERNELS_CPU_ATTEND_ROWS_INL_H_
#endif

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace refit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// q: [hd]; k_row(s), v_row(s): the key and value rows s (0 <= s < len) of this kv head.
// scores: scratch [len]. out: [hd].
template <class KRow, class VRow>
HWY_INLINE void AttendRows(const float* HWY_RESTRICT q, const KRow& k_row, const VRow& v_row, int64_t len,
                           int64_t hd, float scale, float* HWY_RESTRICT scores, float* HWY_RESTRICT out) {
  using DF = hn::ScalableTag<float>;
  using VF = hn::Vec<DF>;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  float mx = -HUGE_VALF;
  for (int64_t s = 0; s < len; ++s) {
    const float* kr = k_row(s);
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
    const float* vr = v_row(s);
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

#endif  // include guard toggled per target
