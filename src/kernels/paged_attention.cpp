// Argument checks and dispatch for ops::paged_attention. The index tensors are validated
// here (values, not only shapes) because a kernel indexes memory with them.
#include "kernels/paged_attention.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"
#include "kernels/op_names.h"
#include "kernels/registry.h"

namespace refit::ops {
namespace {

void need(bool ok, const char* what, const Tensor& t) {
  if (!ok) fail("paged_attention: {} (got {})", what, t.defined() ? t.str() : "undefined tensor");
}

}  // namespace

void paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                     const Tensor& block_tables, const Tensor& query_starts,
                     const Tensor& start_positions, float scale, Tensor& out, int64_t window,
                     const Tensor& sinks) {
  need(q.defined() && q.dim() == 3, "'q' must be 3-D [N, n_heads, head_dim]", q);
  need(k_pool.defined() && k_pool.dim() == 4,
       "'k_pool' must be 4-D [n_blocks, block_size, n_kv_heads, head_dim]", k_pool);
  need(v_pool.defined() && v_pool.shape() == k_pool.shape(), "'v_pool' must have k_pool's shape",
       v_pool);
  need(block_tables.defined() && block_tables.dim() == 2,
       "'block_tables' must be 2-D [B, max_blocks]", block_tables);
  const int64_t B = block_tables.size(0);
  need(query_starts.defined() && query_starts.dim() == 1 && query_starts.size(0) == B + 1,
       "'query_starts' must be [B + 1] with B = block_tables rows", query_starts);
  need(start_positions.defined() && start_positions.dim() == 1 && start_positions.size(0) == B,
       "'start_positions' must be [B]", start_positions);
  need(out.defined() && out.shape() == q.shape(), "'out' must have q's shape", out);
  if (out.read_only()) fail("paged_attention: output 'out' is read-only ({})", out.str());
  const int64_t N = q.size(0), H = q.size(1), hd = q.size(2);
  const int64_t n_blocks = k_pool.size(0), bs = k_pool.size(1), KVH = k_pool.size(2);
  if (k_pool.size(3) != hd)
    fail("paged_attention: pool head_dim {} differs from q head_dim {}", k_pool.size(3), hd);
  if (KVH <= 0 || H % KVH != 0)
    fail("paged_attention: n_heads {} must be a multiple of n_kv_heads {}", H, KVH);
  if (!std::isfinite(scale)) fail("paged_attention: scale must be finite, got {}", scale);
  if (window < 0) fail("paged_attention: window must be >= 0 (0: unlimited), got {}", window);
  if (sinks.defined())
    need(sinks.dim() == 1 && sinks.size(0) == H, "'sinks' must be [n_heads] like q's heads", sinks);

  const std::array<const Tensor*, 8> args{
      &q, &k_pool, &v_pool, &block_tables, &query_starts, &start_positions, &out, &sinks};
  const Kernel& kernel = KernelRegistry::global().select(op_names::paged_attention, args);
  if (kernel.device == DeviceType::cpu) {
    // The registry accepted i32 index tensors; check their values before a kernel uses them.
    const int64_t max_blocks = block_tables.size(1);
    if (query_starts.get({0}) != 0 || query_starts.get({B}) != N)
      fail("paged_attention: query_starts must run from 0 to N = {}, got {} .. {}", N,
           query_starts.get({0}), query_starts.get({B}));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t q0 = static_cast<int64_t>(query_starts.get({b}));
      const int64_t q1 = static_cast<int64_t>(query_starts.get({b + 1}));
      const int64_t p0 = static_cast<int64_t>(start_positions.get({b}));
      if (q1 < q0)
        fail("paged_attention: query_starts decreases at sequence {} ({} > {})", b, q0, q1);
      if (p0 < 0) fail("paged_attention: sequence {} starts at negative position {}", b, p0);
      const int64_t used = q1 > q0 ? (p0 + (q1 - q0) + bs - 1) / bs : 0;
      if (used > max_blocks)
        fail("paged_attention: sequence {} needs {} blocks for {} positions, its table holds {}", b,
             used, p0 + (q1 - q0), max_blocks);
      // Blocks wholly before the first token's window are never read (they may be freed).
      const int64_t first = window > 0 && q1 > q0 ? std::max<int64_t>(0, p0 - window + 1) / bs : 0;
      for (int64_t j = first; j < used; ++j) {
        const int64_t blk = static_cast<int64_t>(block_tables.get({b, j}));
        if (blk < 0 || blk >= n_blocks)
          fail(
              "paged_attention: sequence {} block table entry {} is {}, outside the pool of {} "
              "blocks",
              b, j, blk, n_blocks);
      }
    }
  }
  auto fn = reinterpret_cast<kernels::PagedAttentionFn>(kernel.fn);
  fn(q, k_pool, v_pool, block_tables, query_starts, start_positions, scale, out, window, sinks);
}

}  // namespace refit::ops
