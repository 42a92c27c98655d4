// Causal grouped-query attention over a KV cache, in Highway SIMD.
//
// One work item is one new token and up to four query heads of one kv head (a GQA group
// shares its keys and values): scores over the cache rows they may see, a numerically
// stable softmax (subtract the max before exp), then the probability-weighted sum of value
// rows, each key and value row loaded once for the heads together (AttendGroup; each head's
// result is AttendRows's, bit for bit). A kv head serving one query head (no group) and no
// window: an item is four consecutive tokens instead, loading each row once for all
// (AttendTokens, again each token's AttendRows bits). Items are ordered head-major so the pool's
// contiguous chunks give each thread whole heads, which balances the causal triangle
// (every head has the same mix of short and long rows) and keeps a kv head's rows warm.
// A sliding window only moves where a token's rows start: the same AttendRows over the
// rows lo .. p, so window 0 (lo = 0) is the unlimited kernel's arithmetic exactly. Sinks
// (one logit per head, optional) only add a term to each row's softmax denominator.
// Highway needs foreach_target.h right after HWY_TARGET_INCLUDE: not reordered.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention_cpu.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/attend_rows-inl.h"

HWY_BEFORE_NAMESPACE();
namespace refit::cpu::HWY_NAMESPACE {

// q: [hd]; k row s at k + s*ldk, v row s at v + s*ldv; len rows. sink: the head's sink or
// nullptr. scores: scratch [len]. out: [hd].
void AttendOne(const float* HWY_RESTRICT q, const float* k, int64_t ldk, const float* v,
               int64_t ldv, int64_t len, int64_t hd, float scale, const float* sink,
               float* HWY_RESTRICT scores, float* HWY_RESTRICT out) {
  AttendRows(
      q, [=](int64_t s) { return k + s * ldk; }, [=](int64_t s) { return v + s * ldv; }, len, hd,
      scale, sink, scores, out);
}

// nq (2 or 4) query heads sharing k and v: q[j], out[j] per head; sinks: their nq sinks or
// nullptr; scores: scratch [nq][len].
void AttendHeads(int nq, const float* const* q, const float* k, int64_t ldk, const float* v,
                 int64_t ldv, int64_t len, int64_t hd, float scale, const float* sinks,
                 float* HWY_RESTRICT scores, float* const* out) {
  const auto k_row = [=](int64_t s) { return k + s * ldk; };
  const auto v_row = [=](int64_t s) { return v + s * ldv; };
  if (nq == 4)
    AttendGroup<4>(q, k_row, v_row, len, hd, scale, sinks, scores, out);
  else
    AttendGroup<2>(q, k_row, v_row, len, hd, scale, sinks, scores, out);
}

// nt (2 or 4) consecutive tokens of one head: q[j] sees len + j rows (AttendTokens).
void AttendTokenRun(int nt, const float* const* q, const float* k, int64_t ldk, const float* v,
                    int64_t ldv, int64_t len, int64_t hd, float scale, const float* sink,
                    float* HWY_RESTRICT scores, float* const* out) {
  const auto k_row = [=](int64_t s) { return k + s * ldk; };
  const auto v_row = [=](int64_t s) { return v + s * ldv; };
  if (nt == 4)
    AttendTokens<4>(q, k_row, v_row, len, hd, scale, sink, scores, out);
  else
    AttendTokens<2>(q, k_row, v_row, len, hd, scale, sink, scores, out);
}

}  // namespace refit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"

namespace refit::cpu {
HWY_EXPORT(AttendOne);
HWY_EXPORT(AttendHeads);
HWY_EXPORT(AttendTokenRun);

void attention_hwy(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start_pos,
                   float scale, Tensor& out, int64_t window, const Tensor& sinks) {
  init_cpu_isa();
  const int64_t T = q.size(0), H = q.size(1), hd = q.size(2), KVH = k_cache.size(1);
  const int64_t group = H / KVH;  // ops::attention checks H % KVH == 0
  const float* qp = q.data<const float>();
  const float* kp = k_cache.data<const float>();
  const float* vp = v_cache.data<const float>();
  float* op = out.data<float>();
  // [H] contiguous (the row's constraint), or none.
  const float* sp = sinks.defined() ? sinks.data<const float>() : nullptr;
  const int64_t qt = q.stride(0), qh = q.stride(1);
  const int64_t kt = k_cache.stride(0), kh = k_cache.stride(1);
  const int64_t vt = v_cache.stride(0), vh = v_cache.stride(1);
  const int64_t ot = out.stride(0), oh = out.stride(1);
  // Heads per item: four (or two) of one kv head's group when the group divides so.
  const int nq = group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
  // One head alone (no GQA group to share rows) with no window: four consecutive tokens per
  // item share each row's loads (AttendTokens), the same bits as each token alone.
  const int64_t tpi = nq == 1 && window == 0 && T > 1 ? 4 : 1;
  const int64_t per_head = (T + tpi - 1) / tpi;  // items per head (group)
  // Enough work per chunk to pay for a wake-up: about (rows seen) x head_dim x 2 flops.
  const int64_t seen = window > 0 ? std::min(window, start_pos + T) : start_pos + T;
  const int64_t per_item = seen * hd * nq * tpi;
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(per_item, 1));
  parallel_for(
      H / nq * per_head,
      [&](int64_t i0, int64_t i1, int) {
        thread_local std::vector<float> scores;
        scores.resize(static_cast<size_t>(std::max<int64_t>(nq, tpi) * (start_pos + T + 3)));
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t h0 = i / per_head * nq, t = i % per_head * tpi, kvh = h0 / group,
                        pos = start_pos + t;
          // Rows lo .. pos: the last `window` positions (ops.h), or all of them.
          const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0,
                        len = pos - lo + 1;
          const float* k0 = kp + kvh * kh + lo * kt;
          const float* v0 = vp + kvh * vh + lo * vt;
          if (nq == 1 && tpi > 1) {
            // The item's tokens: runs of 4, then 2, then one alone.
            for (int64_t u = t, end = std::min(T, t + tpi); u < end;) {
              const int nt = end - u >= 4 ? 4 : end - u >= 2 ? 2 : 1;
              const float* qs[4];
              float* outs[4];
              for (int j = 0; j < nt; ++j) {
                qs[j] = qp + (u + j) * qt + h0 * qh;
                outs[j] = op + (u + j) * ot + h0 * oh;
              }
              const int64_t n = start_pos + u + 1;  // rows the run's first token sees
              if (nt == 1) HWY_DYNAMIC_DISPATCH(AttendOne)
              (qs[0], k0, kt, v0, vt, n, hd, scale, sp ? sp + h0 : nullptr, scores.data(), outs[0]);
              else HWY_DYNAMIC_DISPATCH(AttendTokenRun)(nt, qs, k0, kt, v0, vt, n, hd, scale,
                                                        sp ? sp + h0 : nullptr, scores.data(),
                                                        outs);
              u += nt;
            }
            continue;
          }
          if (nq == 1) {
            HWY_DYNAMIC_DISPATCH(AttendOne)
            (qp + t * qt + h0 * qh, k0, kt, v0, vt, len, hd, scale, sp ? sp + h0 : nullptr,
             scores.data(), op + t * ot + h0 * oh);
            continue;
          }
          const float* qs[4];
          float* outs[4];
          for (int j = 0; j < nq; ++j) {
            qs[j] = qp + t * qt + (h0 + j) * qh;
            outs[j] = op + t * ot + (h0 + j) * oh;
          }
          HWY_DYNAMIC_DISPATCH(AttendHeads)
          (nq, qs, k0, kt, v0, vt, len, hd, scale, sp ? sp + h0 : nullptr, scores.data(), outs);
        }
      },
      grain);
}

}  // namespace refit::cpu
#endif  // HWY_ONCE
