#include "models/batched_forward.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/paged_attention.h"

namespace refit {

PagedKvCache make_paged_cache(const LlamaModel& model, int64_t n_blocks, int64_t block_size) {
  const ModelConfig& c = model.config();
  PagedKvCacheOptions o;
  o.n_layers = c.n_layers;
  o.n_kv_heads = model.blocks().empty() ? c.n_kv_heads : model.blocks()[0].attention->local_kv_heads();
  o.head_dim = c.head_dim;
  o.block_size = block_size;
  o.n_blocks = n_blocks;
  return PagedKvCache(o);
}

BatchForwardResult batched_forward(const LlamaModel& model, std::span<const BatchSequence> batch,
                                   PagedKvCache& cache) {
  const ModelConfig& c = model.config();
  const int64_t B = static_cast<int64_t>(batch.size());
  if (B == 0) fail("batched_forward: empty batch");
  if (cache.options().n_layers != c.n_layers || cache.options().head_dim != c.head_dim)
    fail("batched_forward: the paged cache has {} layers of head_dim {}, the model {} of {}",
         cache.options().n_layers, cache.options().head_dim, c.n_layers, c.head_dim);

  // Stack the new tokens; index tensors for rope and paged attention.
  int64_t N = 0, max_blocks = 1;
  for (int64_t b = 0; b < B; ++b) {
    const BatchSequence& s = batch[static_cast<size_t>(b)];
    const int64_t T = static_cast<int64_t>(s.tokens.size());
    if (s.start_pos < 0 || s.start_pos + T > c.max_seq_len)
      fail("batched_forward: sequence {} positions {}..{} exceed the context of {}", b, s.start_pos,
           s.start_pos + T - 1, c.max_seq_len);
    if (cache.blocks_for(s.start_pos + T) > static_cast<int64_t>(s.block_table.size()))
      fail("batched_forward: sequence {} needs {} blocks for {} positions, its table has {}", b,
           cache.blocks_for(s.start_pos + T), s.start_pos + T, s.block_table.size());
    if (T == 0 && s.logits != LogitsWanted::none)
      fail("batched_forward: sequence {} has no new tokens but wants logits", b);
    N += T;
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(s.block_table.size()));
  }
  if (N == 0) fail("batched_forward: no tokens in the batch");
  Tensor ids = Tensor::empty({N}, DType::i32), positions = Tensor::empty({N}, DType::i32);
  Tensor tables = Tensor::empty({B, max_blocks}, DType::i32);
  Tensor query_starts = Tensor::empty({B + 1}, DType::i32), starts = Tensor::empty({B}, DType::i32);
  int32_t* idp = ids.data<int32_t>();
  int32_t* pp = positions.data<int32_t>();
  int32_t* tp = tables.data<int32_t>();
  std::fill(tp, tp + B * max_blocks, -1);
  BatchForwardResult result;
  std::vector<int64_t> logit_rows;  // rows of the stacked activation that need logits
  int64_t row = 0;
  for (int64_t b = 0; b < B; ++b) {
    const BatchSequence& s = batch[static_cast<size_t>(b)];
    const int64_t T = static_cast<int64_t>(s.tokens.size());
    query_starts.data<int32_t>()[b] = static_cast<int32_t>(row);
    starts.data<int32_t>()[b] = static_cast<int32_t>(s.start_pos);
    std::copy(s.block_table.begin(), s.block_table.end(), tp + b * max_blocks);
    for (int64_t t = 0; t < T; ++t) {
      idp[row + t] = s.tokens[static_cast<size_t>(t)];
      pp[row + t] = static_cast<int32_t>(s.start_pos + t);
    }
    result.first_row.push_back(static_cast<int64_t>(logit_rows.size()));
    if (s.logits == LogitsWanted::all)
      for (int64_t t = 0; t < T; ++t) logit_rows.push_back(row + t);
    else if (s.logits == LogitsWanted::last)
      logit_rows.push_back(row + T - 1);
    result.n_rows.push_back(static_cast<int64_t>(logit_rows.size()) - result.first_row.back());
    row += T;
  }
  query_starts.data<int32_t>()[B] = static_cast<int32_t>(N);

  Tensor x = model.embedding().forward(ids);  // [N, dim]
  Tensor h = Tensor::empty({N, c.dim}, DType::f32);
  for (size_t l = 0; l < model.blocks().size(); ++l) {
    const LlamaModel::Block& blk = model.blocks()[l];
    ops::rms_norm(x, blk.attn_norm->data(), c.rms_eps, h);
    QkvProjection p = blk.attention->project(h, positions, model.rope_table());
    // Each sequence's new k/v go to its own blocks before attention reads them.
    for (int64_t b = 0; b < B; ++b) {
      const BatchSequence& s = batch[static_cast<size_t>(b)];
      const int64_t q0 = query_starts.data<int32_t>()[b];
      const int64_t T = static_cast<int64_t>(s.tokens.size());
      if (T == 0) continue;
      cache.write(static_cast<int64_t>(l), s.block_table, s.start_pos, p.k.narrow(0, q0, T),
                  p.v.narrow(0, q0, T));
    }
    Tensor attn = Tensor::empty(p.q.shape(), DType::f32);
    ops::paged_attention(p.q, cache.keys(static_cast<int64_t>(l)), cache.values(static_cast<int64_t>(l)),
                         tables, query_starts, starts, blk.attention->scale(), attn);
    Tensor o = blk.attention->output(attn);
    ops::add(x, o, x);
    ops::rms_norm(x, blk.ffn_norm->data(), c.rms_eps, h);
    Tensor f = blk.ffn->forward(h);
    ops::add(x, f, x);
  }

  const int64_t R = static_cast<int64_t>(logit_rows.size());
  if (R == 0) {
    result.logits = Tensor::empty({0, c.vocab_size}, DType::f32);
    return result;
  }
  Tensor picked = Tensor::empty({R, c.dim}, DType::f32);
  for (int64_t r = 0; r < R; ++r)
    picked.select(0, r).copy_from(x.select(0, logit_rows[static_cast<size_t>(r)]));
  Tensor normed = Tensor::empty({R, c.dim}, DType::f32);
  ops::rms_norm(picked, model.final_norm().data(), c.rms_eps, normed);
  result.logits = model.lm_head().forward(normed);
  return result;
}

}  // namespace refit
