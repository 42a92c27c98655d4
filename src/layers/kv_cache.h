// Key/value cache of one sequence: per layer, f32 [max_seq, n_kv_heads, head_dim] for
// keys and for values. Row p holds the token at position p.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "models/model_config.h"

namespace refit {

class KvCache {
 public:
  // n_kv_heads: this rank's KV heads (all of them without tensor parallelism).
  KvCache(const ModelConfig& config, int64_t max_seq, int64_t n_kv_heads);
  int64_t max_seq() const { return max_seq_; }
  Tensor& keys(int64_t layer) { return keys_[layer]; }
  Tensor& values(int64_t layer) { return values_[layer]; }
  size_t nbytes() const;

 private:
  int64_t max_seq_;
  std::vector<Tensor> keys_, values_;
};

}  // namespace refit
