// The paged-attention op: causal grouped-query attention for a batch of sequences whose
// keys and values live in a PagedKvCache block pool (layers/paged_kv_cache.h).
//
// Kept apart from kernels/ops.h because only the serving path uses it; it dispatches
// through the same registry (law L3), op name "paged_attention".
#pragma once

#include "core/tensor.h"

namespace refit::ops {

// q: f32 [N, n_heads, head_dim]: the new tokens of B sequences, concatenated.
// k_pool, v_pool: f32 [n_blocks, block_size, n_kv_heads, head_dim].
// block_tables: i32 [B, max_blocks]: row b lists sequence b's blocks in position order
//   (entries past what the sequence needs are ignored, e.g. -1 padding, and so are those
//   wholly before the window of its first new token).
// query_starts: i32 [B + 1]: sequence b's tokens are q rows query_starts[b] ..
//   query_starts[b+1]-1 (non-decreasing, query_starts[0] = 0, query_starts[B] = N).
// start_positions: i32 [B]: position of sequence b's first new token; the new tokens'
//   k/v are already written to the pool.
// Token i of sequence b sits at p = start_positions[b] + (i - query_starts[b]) and attends
// positions k <= p, and with a sliding window (window > 0) only those with p - k < window
// (ops::attention's rule). Query head h uses kv head h / (n_heads / n_kv_heads).
// sinks: optional f32 [n_heads], one logit per head joining the softmax's denominator
// (ops::attention). out: f32 [N, H, hd].
//
// Batch invariance: each (token, head) output is computed the same way whatever else is
// in the batch and however the sequence's prompt was chunked; on the CPU it is bitwise
// equal to ops::attention over a contiguous cache holding the same rows.
void paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                     const Tensor& block_tables, const Tensor& query_starts,
                     const Tensor& start_positions, float scale, Tensor& out, int64_t window = 0,
                     const Tensor& sinks = Tensor());

}  // namespace refit::ops

namespace refit::kernels {
// select() args: {q, k_pool, v_pool, block_tables, query_starts, start_positions, out, sinks}
// (sinks optional)
using PagedAttentionFn = void (*)(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                                  const Tensor& block_tables, const Tensor& query_starts,
                                  const Tensor& start_positions, float scale, Tensor& out,
                                  int64_t window, const Tensor& sinks);
}  // namespace refit::kernels
