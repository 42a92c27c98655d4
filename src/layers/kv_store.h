// Where a forward pass keeps keys and values: the interface the block loop talks to, so
// the same loop runs over one sequence's contiguous cache and over the server's paged
// cache. A pass calls begin() once with its batch, then per layer write() the new tokens'
// k/v and attend() to everything each query may see.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "layers/forward_batch.h"

namespace refit {

class KvStore {
 public:
  virtual ~KvStore() = default;
  // Checks that the batch fits (throws naming the sequence; nothing is written then) and
  // prepares the indices the layers share. The spans must outlive the pass.
  virtual void begin(std::span<const BatchSequence> batch) = 0;
  // k, v: f32 [N, kv_heads, head_dim], the batch's new tokens stacked in order.
  virtual void write(int64_t layer, const Tensor& k, const Tensor& v) = 0;
  // q: f32 [N, heads, head_dim] -> out, same shape. Causal; `window` > 0 limits each
  // query to the `window` latest positions (itself included). sinks: f32 [heads] (the
  // local heads' attention sinks) or an undefined Tensor for none (ops::attention).
  virtual void attend(int64_t layer, const Tensor& q, float scale, int64_t window,
                      const Tensor& sinks, Tensor& out) = 0;
};

}  // namespace refit
