#include "layers/kv_cache.h"

#include <cstring>

#include "core/error.h"
#include "kernels/ops.h"

namespace refit {

KvCache::KvCache(int64_t n_layers, int64_t max_seq, int64_t n_kv_heads, int64_t head_dim)
    : max_seq_(max_seq) {
  for (int64_t l = 0; l < n_layers; ++l) {
    keys_.push_back(Tensor::empty({max_seq, n_kv_heads, head_dim}, DType::f32));
    values_.push_back(Tensor::empty({max_seq, n_kv_heads, head_dim}, DType::f32));
  }
}

size_t KvCache::nbytes() const {
  size_t n = 0;
  for (size_t i = 0; i < keys_.size(); ++i) n += keys_[i].nbytes() + values_[i].nbytes();
  return n;
}

void ContiguousKvStore::begin(std::span<const BatchSequence> batch) {
  if (batch.size() != 1)
    fail("a contiguous KV cache holds one sequence; the batch has {}", batch.size());
  start_pos_ = batch[0].start_pos;
  n_tokens_ = static_cast<int64_t>(batch[0].tokens.size());
  if (start_pos_ + n_tokens_ > cache_.max_seq())
    fail("context length exceeded: positions {}..{} do not fit the {}-token cache", start_pos_,
         start_pos_ + n_tokens_ - 1, cache_.max_seq());
}

void ContiguousKvStore::write(int64_t layer, const Tensor& k, const Tensor& v) {
  // The cache rows of the new tokens are contiguous: copy them in place.
  Tensor& kc = cache_.keys(layer);
  const size_t row_bytes = static_cast<size_t>(kc.size(1) * kc.size(2)) * sizeof(float);
  std::memcpy(static_cast<char*>(kc.raw_data()) + start_pos_ * row_bytes, k.raw_data(),
              n_tokens_ * row_bytes);
  std::memcpy(static_cast<char*>(cache_.values(layer).raw_data()) + start_pos_ * row_bytes,
              v.raw_data(), n_tokens_ * row_bytes);
}

void ContiguousKvStore::attend(int64_t layer, const Tensor& q, float scale, int64_t window,
                               const Tensor& sinks, Tensor& out) {
  ops::attention(q, cache_.keys(layer), cache_.values(layer), start_pos_, scale, out, window,
                 sinks);
}

}  // namespace refit
