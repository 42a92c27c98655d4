// Key/value cache of one sequence: per layer, f32 [max_seq, n_kv_heads, head_dim] for
// keys and for values. Row p holds the token at position p. ContiguousKvStore is its
// KvStore for the block loop (one sequence per pass).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "layers/kv_store.h"

namespace refit {

class KvCache {
 public:
  // n_kv_heads: this rank's KV heads (all of them without tensor parallelism).
  KvCache(int64_t n_layers, int64_t max_seq, int64_t n_kv_heads, int64_t head_dim);
  int64_t max_seq() const { return max_seq_; }
  int64_t n_layers() const { return static_cast<int64_t>(keys_.size()); }
  Tensor& keys(int64_t layer) { return keys_[layer]; }
  Tensor& values(int64_t layer) { return values_[layer]; }
  size_t nbytes() const;

 private:
  int64_t max_seq_;
  std::vector<Tensor> keys_, values_;
};

class ContiguousKvStore : public KvStore {
 public:
  explicit ContiguousKvStore(KvCache& cache) : cache_(cache) {}
  void begin(std::span<const BatchSequence> batch) override;
  void write(int64_t layer, const Tensor& k, const Tensor& v) override;
  void attend(int64_t layer, const Tensor& q, float scale, int64_t window, const Tensor& sinks,
              Tensor& out) override;

 private:
  KvCache& cache_;
  int64_t start_pos_ = 0, n_tokens_ = 0;
};

}  // namespace refit
