#include "layers/kv_cache.h"

namespace refit {

KvCache::KvCache(const ModelConfig& c, int64_t max_seq, int64_t n_kv_heads) : max_seq_(max_seq) {
  for (int64_t l = 0; l < c.n_layers; ++l) {
    keys_.push_back(Tensor::empty({max_seq, n_kv_heads, c.head_dim}, DType::f32));
    values_.push_back(Tensor::empty({max_seq, n_kv_heads, c.head_dim}, DType::f32));
  }
}

size_t KvCache::nbytes() const {
  size_t n = 0;
  for (size_t i = 0; i < keys_.size(); ++i) n += keys_[i].nbytes() + values_[i].nbytes();
  return n;
}

}  // namespace refit
