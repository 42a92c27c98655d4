// Paged causal grouped-query attention over a PagedKvCache block pool, in Highway SIMD.
//
// The arithmetic for one (token, head) is attention_cpu.cpp's: both run AttendRows or its
// grouped form AttendGroup (attend_rows-inl.h: the same steps per head, bit for bit, with
// the query heads of a GQA group sharing each key and value load); only the address of
// cache row s comes from the block table. Hence a token's output does not depend on
// which other sequences share the call, nor on how its prompt was chunked, and equals the
// contiguous-cache kernel bit for bit: the batch invariance the server promises. A
// sliding window starts a token's rows at lo instead of 0, as in attention_cpu.cpp, and
// sinks (optional, one logit per head) join each row's softmax denominator as there.
// Highway needs foreach_target.h right after HWY_TARGET_INCLUDE: not reordered.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/paged_attention_cpu.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include "kernels/cpu/attend_rows-inl.h"

HWY_BEFORE_NAMESPACE();
namespace refit::cpu::HWY_NAMESPACE {

// Where cache row r of one kv head lives: block table[r / bs], row r % bs of it. A block
// size that is a power of two (the default 16) takes a shift and a mask: the two 64-bit
// divisions per row cost more than the row's dot product at head_dim 64 (attention was a
// tenth of a serving step at 32 clients, Zen 2).
struct PowerOfTwoBlocks {
  int shift;
  int64_t mask;
  int64_t block(int64_t r) const { return r >> shift; }
  int64_t row(int64_t r) const { return r & mask; }
};
struct AnyBlocks {
  int64_t bs;
  int64_t block(int64_t r) const { return r / bs; }
  int64_t row(int64_t r) const { return r % bs; }
};

// Calls fn with the block arithmetic for bs.
template <class Fn>
HWY_INLINE void WithBlocks(int64_t bs, const Fn& fn) {
  if (bs > 0 && (bs & (bs - 1)) == 0)
    fn(PowerOfTwoBlocks{__builtin_ctzll(static_cast<unsigned long long>(bs)), bs - 1});
  else
    fn(AnyBlocks{bs});
}

// Cache row s (of rows lo, lo + 1, ...) of one kv head in k or v: base + table[r / bs] * ldb
// + (r % bs) * ldr with r = lo + s.
template <class Blocks>
struct CacheRows {
  const float* base;
  int64_t ldb, ldr;
  const int32_t* table;
  Blocks blocks;
  int64_t lo;
  const float* operator()(int64_t s) const {
    return base + table[blocks.block(lo + s)] * ldb + blocks.row(lo + s) * ldr;
  }
};

// q: [hd]. Cache position r of this kv head is at base + table[r / bs] * ldb + (r % bs) * ldr
// (same for k and v through their own bases/strides); rows lo .. lo + len - 1 are attended.
// sink: the head's sink or nullptr. scores: scratch [len].
void PagedAttendOne(const float* HWY_RESTRICT q, const float* k, const float* v, int64_t ldb_k,
                    int64_t ldr_k, int64_t ldb_v, int64_t ldr_v, const int32_t* table, int64_t bs,
                    int64_t lo, int64_t len, int64_t hd, float scale, const float* sink,
                    float* HWY_RESTRICT scores, float* HWY_RESTRICT out) {
  WithBlocks(bs, [&](auto blocks) {
    using R = CacheRows<decltype(blocks)>;
    AttendRows(q, R{k, ldb_k, ldr_k, table, blocks, lo}, R{v, ldb_v, ldr_v, table, blocks, lo}, len,
               hd, scale, sink, scores, out);
  });
}

// nq (2 or 4) query heads sharing this kv head: q[j], out[j]; sinks: their nq sinks or
// nullptr; scores: scratch [nq][len].
void PagedAttendHeads(int nq, const float* const* q, const float* k, const float* v, int64_t ldb_k,
                      int64_t ldr_k, int64_t ldb_v, int64_t ldr_v, const int32_t* table, int64_t bs,
                      int64_t lo, int64_t len, int64_t hd, float scale, const float* sinks,
                      float* HWY_RESTRICT scores, float* const* out) {
  WithBlocks(bs, [&](auto blocks) {
    using R = CacheRows<decltype(blocks)>;
    const R k_row{k, ldb_k, ldr_k, table, blocks, lo}, v_row{v, ldb_v, ldr_v, table, blocks, lo};
    if (nq == 4)
      AttendGroup<4>(q, k_row, v_row, len, hd, scale, sinks, scores, out);
    else
      AttendGroup<2>(q, k_row, v_row, len, hd, scale, sinks, scores, out);
  });
}

}  // namespace refit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/serve_kernels.h"

namespace refit::cpu {
HWY_EXPORT(PagedAttendOne);
HWY_EXPORT(PagedAttendHeads);

void paged_attention_hwy(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                         const Tensor& block_tables, const Tensor& query_starts,
                         const Tensor& start_positions, float scale, Tensor& out, int64_t window,
                         const Tensor& sinks) {
  init_cpu_isa();
  const int64_t N = q.size(0), H = q.size(1), hd = q.size(2);
  const int64_t bs = k_pool.size(1), KVH = k_pool.size(2);
  const int64_t B = block_tables.size(0), max_blocks = block_tables.size(1);
  const int64_t group = H / KVH;
  if (N == 0) return;
  const int32_t* tables = block_tables.data<const int32_t>();
  const int32_t* qs = query_starts.data<const int32_t>();
  const int32_t* sp = start_positions.data<const int32_t>();
  // Which sequence each token belongs to, and its position.
  std::vector<int32_t> seq_of(static_cast<size_t>(N));
  std::vector<int64_t> pos_of(static_cast<size_t>(N));
  int64_t max_len = 0, total_len = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = qs[b]; i < qs[b + 1]; ++i) {
      seq_of[static_cast<size_t>(i)] = static_cast<int32_t>(b);
      pos_of[static_cast<size_t>(i)] = sp[b] + (i - qs[b]);
      const int64_t p = pos_of[static_cast<size_t>(i)];
      const int64_t seen = window > 0 ? std::min(window, p + 1) : p + 1;
      max_len = std::max(max_len, seen);
      total_len += seen;
    }
  const float* qp = q.data<const float>();
  const float* kp = k_pool.data<const float>();
  const float* vp = v_pool.data<const float>();
  float* op = out.data<float>();
  // [H] contiguous (the row's constraint), or none.
  const float* sk = sinks.defined() ? sinks.data<const float>() : nullptr;
  const int64_t qt = q.stride(0), qh = q.stride(1), ot = out.stride(0), oh = out.stride(1);
  const int64_t kb = k_pool.stride(0), kr = k_pool.stride(1), kh = k_pool.stride(2);
  const int64_t vb = v_pool.stride(0), vr = v_pool.stride(1), vh = v_pool.stride(2);
  // Heads per item as in attention_cpu.cpp: four (or two) of one kv head's group.
  const int nq = group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
  const int64_t per_item = std::max<int64_t>(1, total_len / N) * hd * nq;
  const int64_t grain = std::max<int64_t>(1, 8192 / per_item);
  // Item order. Head-major as in attention_cpu.cpp (whole heads per thread chunk) when a
  // sequence brings several tokens: they read the same head's rows one after another, from
  // cache. Token-major when every sequence brings one token (decode): no row is read
  // twice, and the heads of one token then walk each block's storage front to back (the
  // pool is head-major: a block holds head 0's rows, then head 1's, ...), one stream the
  // hardware prefetcher follows instead of a jump per head. Either order computes each
  // (token, head) alone, so the results are the same.
  const int64_t head_items = H / nq;
  const bool token_major = N == B;
  parallel_for(
      head_items * N,
      [&](int64_t i0, int64_t i1, int) {
        thread_local std::vector<float> scores;
        scores.resize(static_cast<size_t>(nq * max_len));
        for (int64_t it = i0; it < i1; ++it) {
          const int64_t h0 = (token_major ? it % head_items : it / N) * nq,
                        i = token_major ? it / head_items : it % N, kvh = h0 / group;
          const int64_t b = seq_of[static_cast<size_t>(i)], pos = pos_of[static_cast<size_t>(i)];
          const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0,
                        len = pos - lo + 1;
          if (nq == 1) {
            HWY_DYNAMIC_DISPATCH(PagedAttendOne)
            (qp + i * qt + h0 * qh, kp + kvh * kh, vp + kvh * vh, kb, kr, vb, vr,
             tables + b * max_blocks, bs, lo, len, hd, scale, sk ? sk + h0 : nullptr, scores.data(),
             op + i * ot + h0 * oh);
            continue;
          }
          const float* q_heads[4];
          float* outs[4];
          for (int j = 0; j < nq; ++j) {
            q_heads[j] = qp + i * qt + (h0 + j) * qh;
            outs[j] = op + i * ot + (h0 + j) * oh;
          }
          HWY_DYNAMIC_DISPATCH(PagedAttendHeads)
          (nq, q_heads, kp + kvh * kh, vp + kvh * vh, kb, kr, vb, vr, tables + b * max_blocks, bs,
           lo, len, hd, scale, sk ? sk + h0 : nullptr, scores.data(), outs);
        }
      },
      grain);
}

}  // namespace refit::cpu
#endif  // HWY_ONCE
