// The paged cache as the block loop's KvStore: each sequence's new k/v go to its own
// blocks, and attention reads every sequence's blocks in one paged-attention call.
#pragma once

#include <vector>

#include "layers/kv_store.h"
#include "layers/paged_kv_cache.h"

namespace refit {

class PagedKvStore : public KvStore {
 public:
  explicit PagedKvStore(PagedKvCache& cache) : cache_(cache) {}
  void begin(std::span<const BatchSequence> batch) override;
  void write(int64_t layer, const Tensor& k, const Tensor& v) override;
  void attend(int64_t layer, const Tensor& q, float scale, int64_t window, const Tensor& sinks,
              Tensor& out) override;

 private:
  PagedKvCache& cache_;
  std::span<const BatchSequence> batch_;
  Tensor tables_, query_starts_, starts_;
};

}  // namespace refit
