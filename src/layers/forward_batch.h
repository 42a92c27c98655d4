// What one forward pass runs: the new tokens of one or more sequences, and which logits
// rows each wants. A single sequence over a contiguous cache and a batch over the paged
// cache are the same thing to the model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace refit {

enum class LogitsWanted : uint8_t {
  none,  // an intermediate prompt chunk: only its k/v matter
  last,  // the row of the last new token (sampling)
  all,   // a row per new token (prompt logprobs, teacher forcing)
};

struct BatchSequence {
  std::span<const int32_t> tokens;  // the new tokens, at positions start_pos..
  int64_t start_pos = 0;            // positions before it are already in the cache
  std::span<const int32_t>
      block_table;  // paged cache: must cover start_pos + tokens.size() positions
  LogitsWanted logits = LogitsWanted::last;
  // Routing replay (mixture of experts): the experts of the first n new tokens, i32
  // [n, moe layers, k] row-major (n <= tokens.size(); empty: the router decides).
  std::span<const int32_t> forced_experts;
};

struct BatchForwardResult {
  Tensor logits;                   // f32 [R, vocab]: the wanted rows, sequence by sequence
  std::vector<int64_t> first_row;  // per sequence: its first row in `logits`
  std::vector<int64_t> n_rows;     // per sequence: how many rows it has
  // Mixture of experts: every new token's experts, i32 [N, moe layers, k] in batch order
  // (a sequence's tokens from first_token); undefined for dense models.
  Tensor routed_experts;
  std::vector<int64_t> first_token;
};

}  // namespace refit
