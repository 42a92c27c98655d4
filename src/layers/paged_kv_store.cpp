#include "layers/paged_kv_store.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/paged_attention.h"

namespace refit {

void PagedKvStore::begin(std::span<const BatchSequence> batch) {
  const int64_t B = static_cast<int64_t>(batch.size());
  int64_t max_blocks = 1;
  for (int64_t b = 0; b < B; ++b) {
    const BatchSequence& s = batch[static_cast<size_t>(b)];
    const int64_t T = static_cast<int64_t>(s.tokens.size());
    if (cache_.blocks_for(s.start_pos + T) > static_cast<int64_t>(s.block_table.size()))
      fail("batched_forward: sequence {} needs {} blocks for {} positions, its table has {}", b,
           cache_.blocks_for(s.start_pos + T), s.start_pos + T, s.block_table.size());
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(s.block_table.size()));
  }
  batch_ = batch;
  tables_ = Tensor::empty({B, max_blocks}, DType::i32);
  query_starts_ = Tensor::empty({B + 1}, DType::i32);
  starts_ = Tensor::empty({B}, DType::i32);
  int32_t* tp = tables_.data<int32_t>();
  std::fill(tp, tp + B * max_blocks, -1);
  int64_t row = 0;
  for (int64_t b = 0; b < B; ++b) {
    const BatchSequence& s = batch[static_cast<size_t>(b)];
    query_starts_.data<int32_t>()[b] = static_cast<int32_t>(row);
    starts_.data<int32_t>()[b] = static_cast<int32_t>(s.start_pos);
    std::copy(s.block_table.begin(), s.block_table.end(), tp + b * max_blocks);
    row += static_cast<int64_t>(s.tokens.size());
  }
  query_starts_.data<int32_t>()[B] = static_cast<int32_t>(row);
}

void PagedKvStore::write(int64_t layer, const Tensor& k, const Tensor& v) {
  // Each sequence's new k/v go to its own blocks before attention reads them.
  for (size_t b = 0; b < batch_.size(); ++b) {
    const BatchSequence& s = batch_[b];
    const int64_t q0 = query_starts_.data<int32_t>()[b];
    const int64_t T = static_cast<int64_t>(s.tokens.size());
    if (T == 0) continue;
    cache_.write(layer, s.block_table, s.start_pos, k.narrow(0, q0, T), v.narrow(0, q0, T));
  }
}

void PagedKvStore::attend(int64_t layer, const Tensor& q, float scale, int64_t window,
                          const Tensor& sinks, Tensor& out) {
  ops::paged_attention(q, cache_.keys(layer), cache_.values(layer), tables_, query_starts_, starts_,
                       scale, out, window, sinks);
}

}  // namespace refit
