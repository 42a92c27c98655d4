// One query row's attention over `len` cache rows, in Highway SIMD: scores, a numerically
// stable softmax (subtract the max before exp), then the probability-weighted sum of value
// rows (AttendRows), and the same for the query heads of a GQA group together, sharing
// each key and value load (AttendGroup; every head's result is AttendRows's, bit for bit),
// and for consecutive tokens of one head (AttendTokens, the same bits as each token alone).
// Shared by the contiguous-cache kernel (attention_cpu.cpp) and the paged one
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

// clang-format off
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace refit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Eight horizontal sums at once: lane i of the result is SumOfLanes(a[i]) bit for bit. On
// AVX2 SumOfLanes adds lanes i and i + 4, then (0 + 2) + (1 + 3); done for one vector at a
// time that is six shuffles and adds per sum, here the same additions of eight vectors
// share their shuffles (21 in all). Elsewhere (other lane counts and orders) it is
// SumOfLanes itself, one vector at a time.
template <class DF>
HWY_INLINE void EightLaneSums(DF df, const hn::Vec<DF>* a, float* HWY_RESTRICT sums) {
#if HWY_TARGET == HWY_AVX2
  (void)df;
  __m256 b[4];
  for (int j = 0; j < 4; ++j) {
    // [a_j low half, a_j+4 low half] + [a_j high half, a_j+4 high half]
    b[j] = _mm256_add_ps(_mm256_permute2f128_ps(a[j].raw, a[j + 4].raw, 0x20),
                         _mm256_permute2f128_ps(a[j].raw, a[j + 4].raw, 0x31));
  }
  const auto pairs = [](__m256 x, __m256 y) {  // per half: x0+x2, x1+x3, y0+y2, y1+y3
    const __m256d xd = _mm256_castps_pd(x), yd = _mm256_castps_pd(y);
    return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(xd, yd)),
                         _mm256_castpd_ps(_mm256_unpackhi_pd(xd, yd)));
  };
  const __m256 c01 = pairs(b[0], b[1]), c23 = pairs(b[2], b[3]);
  _mm256_storeu_ps(sums, _mm256_add_ps(_mm256_shuffle_ps(c01, c23, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm256_shuffle_ps(c01, c23, _MM_SHUFFLE(3, 1, 3, 1))));
#else
  for (int i = 0; i < 8; ++i) sums[i] = hn::GetLane(hn::SumOfLanes(df, a[i]));
#endif
}

// The scores of NR cache rows starting at s0: each row's dot product in the order of the
// one-row loop (vector lanes over d, SumOfLanes, then the scalar tail), NR rows side by
// side so that their fused multiply-add chains overlap instead of waiting on each other.
template <int NR, class KRow>
HWY_INLINE void ScoreRows(const float* HWY_RESTRICT q, const KRow& k_row, int64_t s0, int64_t hd,
                          float scale, float* HWY_RESTRICT scores) {
  using DF = hn::ScalableTag<float>;
  using VF = hn::Vec<DF>;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const float* kr[NR];
  VF acc[NR];
  for (int j = 0; j < NR; ++j) {
    kr[j] = k_row(s0 + j);
    acc[j] = hn::Zero(df);
  }
  int64_t d = 0;
  for (; d + L <= hd; d += L) {
    const VF qv = hn::LoadU(df, q + d);
    for (int j = 0; j < NR; ++j) acc[j] = hn::MulAdd(qv, hn::LoadU(df, kr[j] + d), acc[j]);
  }
  if constexpr (NR == 8) {
    if (d == hd) {  // no scalar tail: the eight sums together
      float dot[8];
      EightLaneSums(df, acc, dot);
      for (int j = 0; j < 8; ++j) scores[s0 + j] = dot[j] * scale;
      return;
    }
  }
  for (int j = 0; j < NR; ++j) {
    float dot = hn::GetLane(hn::SumOfLanes(df, acc[j]));
    for (int64_t t = d; t < hd; ++t) dot += q[t] * kr[j][t];
    scores[s0 + j] = dot * scale;
  }
}

// The NQ-query form of ScoreRows for 8 / NQ rows starting at s0, each key row loaded once for
// all NQ queries: every score takes ScoreRows's steps. Only for head_dim a multiple of the
// lanes (no scalar tail). scores: [NQ][len].
template <int NQ, class KRow>
HWY_INLINE void ScoreGroupRows(const float* const* q, const KRow& k_row, int64_t s0, int64_t len,
                               int64_t hd, float scale, float* HWY_RESTRICT scores) {
  using DF = hn::ScalableTag<float>;
  using VF = hn::Vec<DF>;
  constexpr int R = 8 / NQ;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const float* kr[R];
  VF acc[NQ * R];
  for (int r = 0; r < R; ++r) kr[r] = k_row(s0 + r);
  for (int i = 0; i < NQ * R; ++i) acc[i] = hn::Zero(df);
  for (int64_t d = 0; d < hd; d += L) {
    VF kv[R];
    for (int r = 0; r < R; ++r) kv[r] = hn::LoadU(df, kr[r] + d);
    for (int j = 0; j < NQ; ++j) {
      const VF qv = hn::LoadU(df, q[j] + d);
      for (int r = 0; r < R; ++r) acc[j * R + r] = hn::MulAdd(qv, kv[r], acc[j * R + r]);
    }
  }
  float dot[8];
  EightLaneSums(df, acc, dot);
  for (int j = 0; j < NQ; ++j)
    for (int r = 0; r < R; ++r) scores[j * len + s0 + r] = dot[j * R + r] * scale;
}

// out[d0, d0 + NV lanes) = sum over s of p[s] * v_row(s)[d], s in order, one fused
// multiply-add per row into accumulators held in registers (element by element the steps
// of `out[d] += p[s] * v[d]` with out starting at 0: the same bits).
template <int NV, class VRow>
HWY_INLINE void WeightedRows(const VRow& v_row, const float* HWY_RESTRICT p, int64_t len,
                             int64_t d0, float* HWY_RESTRICT out) {
  using DF = hn::ScalableTag<float>;
  using VF = hn::Vec<DF>;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  VF acc[NV];
  for (int i = 0; i < NV; ++i) acc[i] = hn::Zero(df);
  for (int64_t s = 0; s < len; ++s) {
    const float* vr = v_row(s) + d0;
    const VF ps = hn::Set(df, p[s]);
    for (int i = 0; i < NV; ++i) acc[i] = hn::MulAdd(ps, hn::LoadU(df, vr + i * L), acc[i]);
  }
  for (int i = 0; i < NV; ++i) hn::StoreU(acc[i], df, out + d0 + i * L);
}

// The NQ-query form of WeightedRows: value row s loaded once for all NQ queries, each
// query's elements taking WeightedRows's steps. p: [NQ][len].
template <int NQ, int NV, class VRow>
HWY_INLINE void WeightedGroup(const VRow& v_row, const float* HWY_RESTRICT p, int64_t len,
                              int64_t d0, float* const* out, int64_t ldp = -1) {
  if (ldp < 0) ldp = len;  // query j's probabilities at p + j * ldp
  using DF = hn::ScalableTag<float>;
  using VF = hn::Vec<DF>;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  VF acc[NQ][NV];
  for (int j = 0; j < NQ; ++j)
    for (int i = 0; i < NV; ++i) acc[j][i] = hn::Zero(df);
  for (int64_t s = 0; s < len; ++s) {
    const float* vr = v_row(s) + d0;
    VF v[NV];
    for (int i = 0; i < NV; ++i) v[i] = hn::LoadU(df, vr + i * L);
    for (int j = 0; j < NQ; ++j) {
      const VF ps = hn::Set(df, p[j * ldp + s]);
      for (int i = 0; i < NV; ++i) acc[j][i] = hn::MulAdd(ps, v[i], acc[j][i]);
    }
  }
  for (int j = 0; j < NQ; ++j)
    for (int i = 0; i < NV; ++i) hn::StoreU(acc[j][i], df, out[j] + d0 + i * L);
}

// scores[0, len) -> exp(score - max), in place; returns their sum (lanes, then the tail).
// A sink (a learned per-head logit, gpt-oss) joins the softmax's denominator only: the max
// runs over the scores and the sink, and exp(sink - max) is added after the scores' sum.
// sink == nullptr: no sink, and exactly the sink-less steps.
HWY_INLINE float SoftmaxInPlace(float* HWY_RESTRICT scores, int64_t len, const float* sink) {
  using DF = hn::ScalableTag<float>;
  using VF = hn::Vec<DF>;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  // The max in vector lanes: max is exact, so any order gives the row-order loop's value.
  // A NaN score is passed over as std::max(mx, NaN) passes it (x86 max returns its second
  // operand when one is NaN), so a NaN key row still gets weight 0 below.
  VF vmax = hn::Set(df, -HUGE_VALF);
  int64_t m = 0;
  for (; m + L <= len; m += L) vmax = hn::Max(hn::LoadU(df, scores + m), vmax);
  float mx = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (; m < len; ++m) mx = std::max(mx, scores[m]);
  if (sink) mx = std::max(mx, *sink);
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
  if (sink) sum += std::exp(*sink - mx);
  return sum;
}

// The scalar part of a row past its vector lanes (head_dim not a multiple of them), then
// the division by the softmax sum.
template <class VRow>
HWY_INLINE void FinishRow(const VRow& v_row, const float* HWY_RESTRICT p, int64_t len, int64_t hd,
                          float sum, float* HWY_RESTRICT out) {
  using DF = hn::ScalableTag<float>;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const int64_t dv = hd / L * L;
  for (int64_t d = dv; d < hd; ++d) out[d] = 0.0f;
  for (int64_t s = 0; s < len; ++s) {
    const float* vr = v_row(s);
    for (int64_t d = dv; d < hd; ++d) out[d] += p[s] * vr[d];
  }
  const auto inv = hn::Set(df, 1.0f / sum);
  int64_t d = 0;
  for (; d + L <= hd; d += L) hn::StoreU(hn::Mul(hn::LoadU(df, out + d), inv), df, out + d);
  for (; d < hd; ++d) out[d] *= 1.0f / sum;
}

// q: [hd]; k_row(s), v_row(s): the key and value rows s (0 <= s < len) of this kv head.
// sink: this head's sink logit, or nullptr for none. scores: scratch [len]. out: [hd].
// Every output element takes the same floating-point steps in the same order as a plain
// row-at-a-time loop would (scores row by row, max and sum in row order, the weighted sum
// of value rows in row order); the loops are only arranged so that independent chains run
// side by side and the output stays in registers (it was re-loaded and re-stored for every
// row, a store-to-load chain per cache row).
template <class KRow, class VRow>
HWY_INLINE void AttendRows(const float* HWY_RESTRICT q, const KRow& k_row, const VRow& v_row,
                           int64_t len, int64_t hd, float scale, const float* sink,
                           float* HWY_RESTRICT scores, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t s = 0;
  for (; s + 8 <= len; s += 8) ScoreRows<8>(q, k_row, s, hd, scale, scores);
  for (; s + 4 <= len; s += 4) ScoreRows<4>(q, k_row, s, hd, scale, scores);
  for (; s < len; ++s) ScoreRows<1>(q, k_row, s, hd, scale, scores);
  const float sum = SoftmaxInPlace(scores, len, sink);
  const int64_t dv = hd / L * L;  // the vector part of a row; the rest in scalar steps
  int64_t d = 0;
  for (; d + 8 * L <= dv; d += 8 * L) WeightedRows<8>(v_row, scores, len, d, out);
  for (; d + 4 * L <= dv; d += 4 * L) WeightedRows<4>(v_row, scores, len, d, out);
  for (; d < dv; d += L) WeightedRows<1>(v_row, scores, len, d, out);
  FinishRow(v_row, scores, len, hd, sum, out);
}

// Vectors of a row per pass: NQ x this many accumulators, the row's vectors and a
// broadcast must fit the registers (32 on AVX-512 and Arm, 16 below AVX-512 on x86).
inline constexpr int kGroupVecs = (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3) ? 3 : 4;

// NT (2 or 4) consecutive tokens of one head in a prefill: token j sees rows [0, len + j).
// Each shared key and value row is loaded once for all NT queries; every output takes
// AttendRows's steps exactly (the scores' sums are SumOfLanes's bits in any grouping, each
// softmax runs over its own row, and token j's value chains go on with its j extra rows
// after the shared ones, in row order), so each row equals AttendRows alone bit for bit.
// scores: scratch [NT][len + NT - 1].
template <int NT, class KRow, class VRow>
HWY_INLINE void AttendTokens(const float* const* q, const KRow& k_row, const VRow& v_row,
                             int64_t len, int64_t hd, float scale, const float* sink,
                             float* HWY_RESTRICT scores, float* const* out) {
  static_assert(NT == 2 || NT == 4, "8 / NT rows per score step");
  using DF = hn::ScalableTag<float>;
  using VF = hn::Vec<DF>;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const int64_t ld = len + NT - 1;
  int64_t s = 0;
  if (hd % L == 0)
    for (; s + 8 / NT <= len; s += 8 / NT) ScoreGroupRows<NT>(q, k_row, s, ld, hd, scale, scores);
  for (; s < len; ++s)
    for (int j = 0; j < NT; ++j) ScoreRows<1>(q[j], k_row, s, hd, scale, scores + j * ld);
  for (int j = 1; j < NT; ++j)
    for (int64_t e = len; e < len + j; ++e)
      ScoreRows<1>(q[j], k_row, e, hd, scale, scores + j * ld);
  float sum[NT];
  for (int j = 0; j < NT; ++j) sum[j] = SoftmaxInPlace(scores + j * ld, len + j, sink);
  const int64_t dv = hd / L * L;
  constexpr int kVecs = NT == 2 ? 4 : kGroupVecs;  // NT x kVecs accumulators in registers
  int64_t d = 0;
  for (; d + kVecs * L <= dv; d += kVecs * L)
    WeightedGroup<NT, kVecs>(v_row, scores, len, d, out, ld);
  if constexpr (kVecs > 2)
    for (; d + 2 * L <= dv; d += 2 * L) WeightedGroup<NT, 2>(v_row, scores, len, d, out, ld);
  for (; d < dv; d += L) WeightedGroup<NT, 1>(v_row, scores, len, d, out, ld);
  // Token j's chains go on with its extra rows, in order.
  for (int j = 1; j < NT; ++j)
    for (int64_t e = len; e < len + j; ++e) {
      const VF pe = hn::Set(df, scores[j * ld + e]);
      const float* ve = v_row(e);
      for (d = 0; d < dv; d += L)
        hn::StoreU(hn::MulAdd(pe, hn::LoadU(df, ve + d), hn::LoadU(df, out[j] + d)), df,
                   out[j] + d);
    }
  for (int j = 0; j < NT; ++j) FinishRow(v_row, scores + j * ld, len + j, hd, sum[j], out[j]);
}

// Up to four query rows against the same cache rows: the query heads of one GQA group at
// one position (same keys, same length). Each query's output takes exactly AttendRows's
// steps, element by element in the same order (so a head's bits do not depend on whether
// it was grouped); the loops only load each key and value row once for all NQ queries and
// keep NQ x kGroupVecs independent chains in flight. sinks: the NQ heads' sink logits, in
// order, or nullptr for none. scores: scratch [NQ][len].

template <int NQ, class KRow, class VRow>
HWY_INLINE void AttendGroup(const float* const* q, const KRow& k_row, const VRow& v_row,
                            int64_t len, int64_t hd, float scale, const float* sinks,
                            float* HWY_RESTRICT scores, float* const* out) {
  using DF = hn::ScalableTag<float>;
  using VF = hn::Vec<DF>;
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t s0 = 0;
  if (hd % L == 0)
    for (; s0 + 8 / NQ <= len; s0 += 8 / NQ)
      ScoreGroupRows<NQ>(q, k_row, s0, len, hd, scale, scores);
  for (int64_t s = s0; s < len; ++s) {
    const float* kr = k_row(s);
    VF acc[NQ];
    for (int j = 0; j < NQ; ++j) acc[j] = hn::Zero(df);
    int64_t d = 0;
    for (; d + L <= hd; d += L) {
      const VF kv = hn::LoadU(df, kr + d);
      for (int j = 0; j < NQ; ++j) acc[j] = hn::MulAdd(hn::LoadU(df, q[j] + d), kv, acc[j]);
    }
    for (int j = 0; j < NQ; ++j) {
      float dot = hn::GetLane(hn::SumOfLanes(df, acc[j]));
      for (int64_t t = d; t < hd; ++t) dot += q[j][t] * kr[t];
      scores[j * len + s] = dot * scale;
    }
  }
  float sum[NQ];
  for (int j = 0; j < NQ; ++j)
    sum[j] = SoftmaxInPlace(scores + j * len, len, sinks ? sinks + j : nullptr);
  const int64_t dv = hd / L * L;
  int64_t d = 0;
  for (; d + kGroupVecs * L <= dv; d += kGroupVecs * L)
    WeightedGroup<NQ, kGroupVecs>(v_row, scores, len, d, out);
  if constexpr (kGroupVecs > 2)
    for (; d + 2 * L <= dv; d += 2 * L) WeightedGroup<NQ, 2>(v_row, scores, len, d, out);
  for (; d < dv; d += L) WeightedGroup<NQ, 1>(v_row, scores, len, d, out);
  for (int j = 0; j < NQ; ++j) FinishRow(v_row, scores + j * len, len, hd, sum[j], out[j]);
}

}  // namespace refit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggled per target
